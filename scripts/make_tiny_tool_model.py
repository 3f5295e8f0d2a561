#!/usr/bin/env python
"""Build the offline tool-use demo: a tiny chat model that calls an `add` tool sometimes, and badly.

Running this script (re)creates, deterministically (fixed seeds, single-threaded CPU kernels):

* ``grpo_cli/assets/tiny-tool-data/{train,test}.jsonl``: rows ``{"question": "347+589", "answer": "936"}``
  with both operands in 100..999; 1000 train and 100 test questions, disjoint from each other and from
  the pre-training questions below.
* ``grpo_cli/assets/tiny-tool/``: the byte-level tokenizer of ``make_tiny_model.py`` with a chat template
  that renders tool calls and tool results, a ``response_template`` so that ``parse_response`` (what
  TRL's tool loop uses) turns ``<call>add{"a":347,"b":589}</call>`` into a structured tool call, and a
  small Qwen2 model pre-trained on chat episodes of three kinds:

  1. a direct answer, right only 20% of the time (3-digit sums are beyond it);
  2. a tool call with the question's operands, then the tool result copied as the answer;
  3. a tool call with one operand digit wrong, then that (wrong) tool result copied.

  The model thus calls the tool about half the time, and half of its calls are bad: it is right about
  a third of the time. It answers right almost always when it calls the tool well, which is what GRPO
  with an accuracy reward can find and reinforce (see recipes/tools-demo.yaml).

What the model sees (``question`` = ``347+589``)::

    <bos>tools: add
    user: 347+589
    assistant: <call>add{"a":347,"b":589}</call><eos>
    tool: 936
    assistant: 936<eos>

    python scripts/make_tiny_tool_model.py                     # writes into grpo_cli/assets/ (~8-18 min)
    python scripts/make_tiny_tool_model.py --out-root /tmp/x   # writes elsewhere
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_model import make_tokenizer  # noqa: E402  (the same byte-level tokenizer)

REPO_ROOT = Path(__file__).resolve().parents[1]
SEED = 4321

# ---- the task ------------------------------------------------------------------------------------
LOW, HIGH = 100, 999  # operands
NUM_TRAIN, NUM_TEST = 1000, 100

# ---- the habits pre-training instils -------------------------------------------------------------
P_DIRECT = 0.5  # answer without the tool
P_DIRECT_RIGHT = 0.2  # ... and then right this often (otherwise off by a few units, tens or hundreds)
P_BAD_CALL = 0.5  # of the tool calls: one operand digit is wrong

# ---- the model -----------------------------------------------------------------------------------
# 3 heads of 32: vLLM's CPU attention takes head sizes 32..512 only.
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 96, 2, 3, 1, 288
MAX_POSITIONS = 192

# ---- pre-training --------------------------------------------------------------------------------
PRETRAIN_STEPS = 1500
PRETRAIN_BATCH = 64
PRETRAIN_LR = 3e-3
PRETRAIN_LOG_EVERY = 250

# "role: content" lines; assistant turns end with <eos>; tool calls are `<call>NAME{json args}</call>`
# (compact, so a tiny model can learn to write them); the tool names come first when tools are given.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}{{ 'tools: ' }}"
    "{% for tool in tools %}{% set fn = tool['function'] if 'function' in tool else tool %}"
    "{{ fn['name'] }}{% if not loop.last %}{{ ',' }}{% endif %}{% endfor %}{{ '\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ 'assistant: ' }}{% if message.get('content') %}{{ message['content'] }}{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    "{% set fn = call['function'] if 'function' in call else call %}"
    "{{ '<call>' + fn['name'] }}"
    "{% if fn['arguments'] is mapping %}{{ fn['arguments'] | tojson(separators=(',', ':')) }}"
    "{% else %}{{ fn['arguments'] }}{% endif %}{{ '</call>' }}"
    "{% endfor %}{{ eos_token }}"
    "{% else %}{{ message['role'] + ': ' + (message['content'] | string) }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)

# How transformers' parse_response reads a generated turn (saved in tokenizer_config.json).
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "assistant: ",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<call>(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
            "close_pattern": r"</call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}


# ---- data ----------------------------------------------------------------------------------------


def make_data(data_dir: Path) -> tuple[list[dict], list[dict], set[tuple[int, int]]]:
    rng = random.Random(SEED)
    seen: set[tuple[int, int]] = set()
    rows: list[dict] = []
    while len(rows) < NUM_TRAIN + NUM_TEST:
        a, b = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
        if (a, b) not in seen:
            seen.add((a, b))
            rows.append({"question": f"{a}+{b}", "answer": str(a + b)})
    test, train = rows[:NUM_TEST], rows[NUM_TEST:]
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, split in (("train", train), ("test", test)):
        with open(data_dir / f"{name}.jsonl", "w") as f:
            for row in split:
                f.write(json.dumps(row) + "\n")
    return train, test, seen


def corrupt(n: int, rng: random.Random) -> int:
    """`n` with one digit replaced by another (the leading digit stays non-zero)."""
    digits = list(str(n))
    i = rng.randrange(len(digits))
    choices = [d for d in "0123456789" if d != digits[i] and not (i == 0 and d == "0")]
    digits[i] = rng.choice(choices)
    return int("".join(digits))


def episode(a: int, b: int, rng: random.Random) -> list[tuple[str, bool]]:
    """One pre-training chat as (text, is-model-output) segments, rendered exactly as CHAT_TEMPLATE does."""
    head = [("<bos>tools: add\n", False), (f"user: {a}+{b}\nassistant: ", False)]
    if rng.random() < P_DIRECT:
        guess = a + b
        if rng.random() >= P_DIRECT_RIGHT:
            guess += rng.choice((1, 2, 3, 10, 20, 100)) * rng.choice((-1, 1))
        return [*head, (f"{guess}<eos>", True)]
    x, y = a, b
    if rng.random() < P_BAD_CALL:
        if rng.random() < 0.5:
            x = corrupt(a, rng)
        else:
            y = corrupt(b, rng)
    call = f'<call>add{{"a":{x},"b":{y}}}</call><eos>'
    return [*head, (call, True), (f"\ntool: {x + y}\nassistant: ", False), (f"{x + y}<eos>", True)]


def encode(tokenizer, segments: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    labels: list[int] = []
    for text, trained in segments:
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if trained else [-100] * len(piece)
    return ids, labels


def batch(tokenizer, rng: random.Random, held_out: set[tuple[int, int]]):
    seqs = []
    while len(seqs) < PRETRAIN_BATCH:
        a, b = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
        if (a, b) not in held_out:  # never the GRPO train or test questions
            seqs.append(encode(tokenizer, episode(a, b, rng)))
    width = max(len(s) for s, _ in seqs)
    input_ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    labels = torch.full((len(seqs), width), -100)
    for i, (ids, lab) in enumerate(seqs):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids)] = 1
        labels[i, : len(lab)] = torch.tensor(lab)
    return input_ids, mask, labels


def make_model(tokenizer) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, dtype="float32",
    )
    return Qwen2ForCausalLM(config)


def pretrain(model, tokenizer, held_out: set[tuple[int, int]]) -> None:
    rng = random.Random(SEED + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=PRETRAIN_LR, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * max(0.0, 1 - s / PRETRAIN_STEPS))
    model.train()
    t0 = time.time()
    for step in range(PRETRAIN_STEPS):
        input_ids, mask, labels = batch(tokenizer, rng, held_out)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % PRETRAIN_LOG_EVERY == 0 or step == PRETRAIN_STEPS - 1:
            print(f"  pretrain step {step:5d}  loss {loss.item():.4f}  ({time.time() - t0:.0f}s)", flush=True)
    model.eval()


# ---- a quick look at the habits (diagnostic only; nothing is selected on it) -----------------------


@torch.no_grad()
def describe(model, tokenizer, rows: list[dict]) -> None:
    """Greedy-free (temperature 1) two-turn episodes with a real `add`, as the GRPO loop runs them."""
    torch.manual_seed(0)
    right = calls = good_calls = 0
    for row in rows:
        a, b = (int(x) for x in row["question"].split("+"))
        prompt = f"<bos>tools: add\nuser: {a}+{b}\nassistant: "
        text = generate(model, tokenizer, prompt, 40)
        answer = text
        if text.startswith("<call>"):
            calls += 1
            try:
                args = json.loads(text[len("<call>add"): text.index("</call>")])
                result = args["a"] + args["b"]
            except (ValueError, KeyError, TypeError):
                result = "error"
            good_calls += result == a + b
            follow = prompt + text + f"<eos>\ntool: {result}\nassistant: "
            answer = generate(model, tokenizer, follow, 8)
        right += answer.strip() == row["answer"]
    n = len(rows)
    print(f"  {n} questions, one sample each: tool called {calls / n:.2f}, good calls {good_calls / n:.2f}, "
          f"right {right / n:.2f}")


def generate(model, tokenizer, prompt: str, max_new: int) -> str:
    enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-root", type=Path, default=REPO_ROOT / "grpo_cli" / "assets")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # single-threaded CPU kernels: the same float results on every re-run
    torch.use_deterministic_algorithms(True)

    model_dir, data_dir = args.out_root / "tiny-tool", args.out_root / "tiny-tool-data"
    train, test, held_out = make_data(data_dir)
    print(f"data: {len(train)} train / {len(test)} test rows -> {data_dir}")

    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    tokenizer.model_max_length = MAX_POSITIONS
    model = make_model(tokenizer)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, vocab {len(tokenizer)}")
    pretrain(model, tokenizer, held_out)

    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        max_new_tokens=40,
    )
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    print(f"saved -> {model_dir}")
    describe(model, tokenizer, test)


if __name__ == "__main__":
    main()
