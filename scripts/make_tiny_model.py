#!/usr/bin/env python
"""Build grpo_cli's embedded offline default: a tiny arithmetic causal LM and its data set.

Running this script (re)creates, deterministically (fixed seeds, single-threaded CPU kernels, so a
re-run writes byte-identical files on the same software stack):

* ``grpo_cli/assets/tiny-arith-data/{train,test}.jsonl``: rows ``{"question": "13+5", "answer": "18"}``,
  all 400 sums ``a+b`` with ``a, b`` in 0..19, shuffled with a fixed seed and split 300 train / 100 test
  (the test questions appear neither in train.jsonl nor in the pre-training below).
  The prompt a trainer sees is ``question + "="`` (e.g. ``"13+5="``); the expected completion is the
  answer digits, then EOS.
* ``grpo_cli/assets/tiny-arith/``: a byte-level tokenizer with no merges (one token per character) and
  a 2-layer, 64-wide Qwen2 model (115k parameters), saved with ``save_pretrained`` (safetensors), plus
  a generation config.

Pre-training (plain torch loop, train questions only) has two phases:

1. clean labels: the model learns addition (held-out greedy accuracy reaches ~1.0);
2. noisy labels: each label is the right sum with probability 0.3, otherwise the sum plus one of
   -2, -1, +1, +2. The model keeps computing the sum but learns to blur its answer around it.

The result "knows" the answer but, sampled at temperature 1, is right only about a quarter of the
time, on train and held-out questions alike. That is the situation in which a short GRPO run on CPU
visibly helps: the accuracy reward separates the right answer from its neighbours and the policy
sharpens onto it, and since the blur is one shared habit rather than per-question memory, the
held-out accuracy rises with it (see benchmarks/vs_trl/trl_plain_demo.py).

    python scripts/make_tiny_model.py                     # writes into grpo_cli/assets/ (~1-2 min)
    python scripts/make_tiny_model.py --out-root /tmp/x   # writes elsewhere
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

REPO_ROOT = Path(__file__).resolve().parents[1]

SEED = 1234

# ---- the task ------------------------------------------------------------------------------------
OPERAND_MAX = 19  # questions are a+b with a, b in 0..OPERAND_MAX: 400 distinct questions
NUM_TEST = 100  # held-out questions; the other 300 are train

# ---- the noise of pre-training phase 2 -----------------------------------------------------------
P_CORRECT = 0.30  # probability that a label is the right answer
NOISE_OFFSETS = (-2, -1, 1, 2)  # otherwise the label is the answer plus one of these (uniformly)

# ---- the model -----------------------------------------------------------------------------------
HIDDEN = 64
LAYERS = 2
HEADS = 2  # head size 32: the smallest vLLM's CPU attention takes (32..512)
KV_HEADS = 1
INTERMEDIATE = 192

# ---- pre-training --------------------------------------------------------------------------------
PRETRAIN_CLEAN_STEPS = 1000  # phase 1: right labels only (learn addition)
PRETRAIN_NOISY_STEPS = 500  # phase 2: noisy labels (become right only part of the time)
PRETRAIN_BATCH = 128
PRETRAIN_LR = 3e-3  # AdamW; 100 warm-up steps, then linear decay to 0 over both phases
PRETRAIN_WEIGHT_DECAY = 0.1
PRETRAIN_LOG_EVERY = 250

# ---- tokenizer -----------------------------------------------------------------------------------
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]  # ids 0, 1, 2, 3
# transformers' Qwen2Tokenizer pre-tokenizer regex (see make_tokenizer for why it is copied here).
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# "role: content" lines after BOS; assistant turns end with EOS; the generation prompt is "assistant: ".
# transformers renders chat templates with trim_blocks=True, hence the explicit {{ '\n' }}.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] + ': ' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


# ---- data ----------------------------------------------------------------------------------------


def make_data(data_dir: Path) -> tuple[list[dict], list[dict]]:
    questions = [(f"{a}+{b}", a + b) for a in range(OPERAND_MAX + 1) for b in range(OPERAND_MAX + 1)]
    random.Random(SEED).shuffle(questions)
    test = [{"question": q, "answer": str(a)} for q, a in questions[:NUM_TEST]]
    train = [{"question": q, "answer": str(a)} for q, a in questions[NUM_TEST:]]
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(data_dir / f"{name}.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return train, test


# ---- tokenizer -----------------------------------------------------------------------------------


def byte_alphabet() -> list[str]:
    """The 256 printable stand-ins byte-level BPE uses for the bytes 0..255 (GPT-2's bytes_to_unicode)."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def make_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with no merges: one token per byte, i.e. per ASCII character; 260 tokens in all.

    Why byte-level rather than a plain character vocabulary: transformers 5 loads the tokenizer of any
    ``model_type == "qwen2"`` checkpoint as ``Qwen2Tokenizer`` whatever tokenizer_config.json says (qwen2
    is in ``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS``), and that class rebuilds the pipeline from the
    vocab and merges with a hard-coded NFC normalizer, Qwen2 split regex and ByteLevel pre-tokenizer and
    decoder. A plain character vocabulary would then silently lose spaces and newlines. This tokenizer
    *is* that pipeline, so ``AutoTokenizer``/``AutoProcessor`` (what TRL uses when given a model path)
    and ``PreTrainedTokenizerFast`` give the same ids for any text. Every byte is in the vocabulary, so
    ``<unk>`` never occurs in practice. Encoding adds ``<bos>`` in front (a post-processor), not EOS.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=PAD,
        padding_side="left",  # for batched generation
        model_max_length=128,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


# ---- model and pre-training ----------------------------------------------------------------------


def make_model(tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    return Qwen2ForCausalLM(config)


def noisy_label(answer: int, rng: random.Random, p_correct: float) -> int:
    if rng.random() < p_correct:
        return answer
    return abs(answer + rng.choice(NOISE_OFFSETS))  # stay non-negative: 0-1 -> 1, 1-2 -> 1


_ENCODED: dict[tuple[str, bool], list[int]] = {}


def _encode(tokenizer, text: str, add_bos: bool) -> list[int]:
    if (text, add_bos) not in _ENCODED:
        _ENCODED[text, add_bos] = tokenizer(text, add_special_tokens=add_bos)["input_ids"]
    return _ENCODED[text, add_bos]


def encode_batch(tokenizer, prompts: list[str], answers: list[str]):
    """Right-padded ``<bos> prompt answer <eos>`` rows; the loss is on ``answer <eos>`` only."""
    seqs, targets = [], []
    for prompt, answer in zip(prompts, answers, strict=True):
        prompt_ids = _encode(tokenizer, prompt, True)
        answer_ids = _encode(tokenizer, answer, False) + [tokenizer.eos_token_id]
        seqs.append(prompt_ids + answer_ids)
        targets.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
    attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    labels = torch.full((len(seqs), width), -100)
    for i, (seq, target) in enumerate(zip(seqs, targets, strict=True)):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention_mask[i, : len(seq)] = 1
        labels[i, : len(target)] = torch.tensor(target)
    return input_ids, attention_mask, labels


def pretrain(model, tokenizer, train: list[dict], test: list[dict]) -> None:
    rng = random.Random(SEED + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=PRETRAIN_LR, weight_decay=PRETRAIN_WEIGHT_DECAY)
    total = PRETRAIN_CLEAN_STEPS + PRETRAIN_NOISY_STEPS
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * max(0.0, 1 - s / total))
    model.train()
    t0 = time.time()
    for step in range(total):
        p_correct = 1.0 if step < PRETRAIN_CLEAN_STEPS else P_CORRECT
        batch = [train[rng.randrange(len(train))] for _ in range(PRETRAIN_BATCH)]
        prompts = [row["question"] + "=" for row in batch]
        answers = [str(noisy_label(int(row["answer"]), rng, p_correct)) for row in batch]
        input_ids, attention_mask, labels = encode_batch(tokenizer, prompts, answers)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % PRETRAIN_LOG_EVERY == 0 or step in (PRETRAIN_CLEAN_STEPS - 1, total - 1):
            # Diagnostic only (nothing is selected on it): does the model know held-out sums?
            greedy = accuracy(model, tokenizer, test, greedy=True)
            model.train()
            phase = "clean" if step < PRETRAIN_CLEAN_STEPS else "noisy"
            print(
                f"  pretrain step {step:5d} ({phase})  loss {loss.item():.4f}"
                f"  held-out greedy accuracy {greedy:.2f}  ({time.time() - t0:.0f}s)",
                flush=True,
            )
    model.eval()


# ---- evaluation ----------------------------------------------------------------------------------


def first_number(text: str) -> str | None:
    match = re.match(r"-?\d+", text.strip())
    return match.group(0) if match else None


@torch.no_grad()
def accuracy(model, tokenizer, rows: list[dict], samples: int = 8, greedy: bool = False) -> float:
    """Fraction of temperature-1 samples (or greedy answers) whose first number is the answer."""
    model.eval()
    samples = 1 if greedy else samples
    prompts = [row["question"] + "=" for row in rows for _ in range(samples)]
    answers = [row["answer"] for row in rows for _ in range(samples)]
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    if greedy:
        sampling = {"do_sample": False}
    with torch.random.fork_rng():  # leave the global RNG state alone
        torch.manual_seed(0)
        out = model.generate(
            **enc,
            **sampling,
            max_new_tokens=4,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(first_number(t) == a for t, a in zip(texts, answers, strict=True)) / len(texts)


# ---- main ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-root", type=Path, default=REPO_ROOT / "grpo_cli" / "assets")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # single-threaded CPU kernels: the same float results on every re-run
    torch.use_deterministic_algorithms(True)

    model_dir = args.out_root / "tiny-arith"
    data_dir = args.out_root / "tiny-arith-data"
    train, test = make_data(data_dir)
    print(f"data: {len(train)} train / {len(test)} test rows -> {data_dir}")

    tokenizer = make_tokenizer()
    model = make_model(tokenizer)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, vocab {len(tokenizer)}")
    pretrain(model, tokenizer, train, test)

    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=4,
    )
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    print(f"saved -> {model_dir}")

    for name, rows in (("train", train), ("test", test)):
        sampled = accuracy(model, tokenizer, rows)
        greedy = accuracy(model, tokenizer, rows, greedy=True)
        print(f"{name}: accuracy at temperature 1 (8 samples/question) {sampled:.3f}, greedy {greedy:.3f}")


if __name__ == "__main__":
    main()
