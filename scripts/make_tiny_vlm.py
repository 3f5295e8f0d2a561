#!/usr/bin/env python
"""Build grpo_cli's offline vision-language demo: a tiny LLaVA model, its processor and a shapes data set.

Running this script (re)creates, deterministically (fixed seeds, single-threaded CPU kernels):

* ``grpo_cli/assets/tiny-shapes-data/``: 32x32 PNG images of one coloured shape (square, circle or
  triangle, random size and position) on a light background, and ``{train,test}.jsonl`` rows
  ``{"image": "images/train-0001.png", "question": "What colour is the shape?", "answer": "red"}``
  (image paths are relative to the JSONL file). Six colours, so chance is 1/6.
* ``grpo_cli/assets/tiny-vlm/``: a ``LlavaForConditionalGeneration`` (a real transformers architecture:
  CLIP vision tower, 1 layer, 32 wide, 8x8 patches -> 16 image tokens; a 2-layer projector; a 2-layer,
  64-wide Qwen2 language model), and its ``LlavaProcessor`` (a PIL-only CLIP image processor, so no
  torchvision is needed, and the byte-level tokenizer of make_tiny_model.py plus an ``<image>`` token).

Why LLaVA rather than Qwen2-VL or Idefics3: their processors carry a video processor that needs
torchvision, which this package does not depend on. LLaVA's processor is image processor + tokenizer.

Pre-training (plain torch loop, train images only) has two phases, like the arithmetic model:

1. clean labels: the model learns to name the colour (held-out greedy accuracy reaches ~1.0);
2. noisy labels: each label is the right colour with probability P_CORRECT, otherwise another colour
   drawn uniformly. The model still sees the colour but blurs its answer over the other five.

Sampled at temperature 1 it is then right about a third of the time, on new images too: the blur is one
shared habit, so GRPO with an accuracy reward sharpens it and held-out accuracy rises with it.

    python scripts/make_tiny_vlm.py                     # writes into grpo_cli/assets/ (~2-3 min)
    python scripts/make_tiny_vlm.py --out-root /tmp/x   # writes elsewhere
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from transformers import (
    CLIPVisionConfig,
    GenerationConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    Qwen2Config,
)
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_model import make_tokenizer  # noqa: E402  (the same byte-level tokenizer)

REPO_ROOT = Path(__file__).resolve().parents[1]
SEED = 4321

# ---- the task ------------------------------------------------------------------------------------
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (235, 205, 30),
    "purple": (140, 50, 170),
    "orange": (245, 135, 25),
}
SHAPES = ("square", "circle", "triangle")
QUESTION = "What colour is the shape?"
IMAGE_SIZE = 32
NUM_TRAIN = 240
NUM_TEST = 60

# ---- the noise of pre-training phase 2 -----------------------------------------------------------
P_CORRECT = 0.40

# ---- the model -----------------------------------------------------------------------------------
PATCH = 8  # 32x32 image -> 4x4 = 16 patches = 16 image tokens
VISION_HIDDEN = 32
TEXT_HIDDEN = 64
IMAGE_TOKEN = "<image>"

# ---- pre-training --------------------------------------------------------------------------------
PRETRAIN_CLEAN_STEPS = 300
PRETRAIN_NOISY_STEPS = 400
PRETRAIN_BATCH = 32
PRETRAIN_LR = 3e-3
PRETRAIN_LOG_EVERY = 100

# Renders string contents and content-part lists ({"type": "image"} -> <image>, {"type": "text"}).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] + ': ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


# ---- data ----------------------------------------------------------------------------------------


def jitter(rgb: tuple[int, int, int], rng: random.Random, amount: int) -> tuple[int, ...]:
    return tuple(max(0, min(255, c + rng.randint(-amount, amount))) for c in rgb)


def draw_shape(colour: str, shape: str, rng: random.Random) -> Image.Image:
    grey = rng.randint(215, 250)
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), jitter((grey, grey, grey), rng, 6))
    draw = ImageDraw.Draw(image)
    size = rng.randint(10, 20)
    x, y = rng.randint(1, IMAGE_SIZE - size - 1), rng.randint(1, IMAGE_SIZE - size - 1)
    fill = jitter(COLOURS[colour], rng, 20)
    if shape == "square":
        draw.rectangle((x, y, x + size, y + size), fill=fill)
    elif shape == "circle":
        draw.ellipse((x, y, x + size, y + size), fill=fill)
    else:
        draw.polygon([(x + size // 2, y), (x, y + size), (x + size, y + size)], fill=fill)
    return image


def make_data(data_dir: Path) -> tuple[list[dict], list[dict]]:
    """PNG files plus JSONL rows; each split has every colour equally often."""
    rng = random.Random(SEED)
    (data_dir / "images").mkdir(parents=True, exist_ok=True)
    splits: dict[str, list[dict]] = {}
    for split, count in (("train", NUM_TRAIN), ("test", NUM_TEST)):
        colours = [c for c in COLOURS for _ in range(count // len(COLOURS))]
        rng.shuffle(colours)
        rows = []
        for i, colour in enumerate(colours):
            shape = rng.choice(SHAPES)
            rel = f"images/{split}-{i:04d}.png"
            draw_shape(colour, shape, rng).save(data_dir / rel, optimize=True)
            rows.append({"image": rel, "question": QUESTION, "answer": colour, "shape": shape})
        with open(data_dir / f"{split}.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        splits[split] = rows
    return splits["train"], splits["test"]


# ---- processor and model -------------------------------------------------------------------------


def make_processor() -> LlavaProcessor:
    tokenizer = make_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    tokenizer.model_max_length = 256
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_convert_rgb=True,
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",  # drop CLS: 16 image tokens, one per patch
        num_additional_image_tokens=1,
        image_token=IMAGE_TOKEN,
        chat_template=CHAT_TEMPLATE,
    )


def make_model(processor: LlavaProcessor) -> LlavaForConditionalGeneration:
    tok = processor.tokenizer
    vision = CLIPVisionConfig(
        hidden_size=VISION_HIDDEN,
        intermediate_size=2 * VISION_HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
    )
    text = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=TEXT_HIDDEN,
        intermediate_size=3 * TEXT_HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,  # head size 32: the smallest vLLM's CPU attention takes (32..512)
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=tok.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
        dtype="float32",
    )
    return LlavaForConditionalGeneration(config)


def prompt_messages(question: str) -> list[dict]:
    """The prompt as TRL builds it from a string prompt plus one image (image part first)."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


def prompt_texts(processor: LlavaProcessor, n: int) -> list[str]:
    text = processor.apply_chat_template(prompt_messages(QUESTION), add_generation_prompt=True, tokenize=False)
    return [text] * n


def encode_batch(processor: LlavaProcessor, images: list, answers: list[str]) -> dict:
    """Right-padded ``prompt answer <eos>`` rows with pixel values; loss on ``answer <eos>`` only."""
    tok = processor.tokenizer
    prompts = processor(images=images, text=prompt_texts(processor, len(images)), add_special_tokens=False)
    seqs, targets = [], []
    for prompt_ids, answer in zip(prompts["input_ids"], answers, strict=True):
        answer_ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seqs.append(list(prompt_ids) + answer_ids)
        targets.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(s) for s in seqs)
    batch = {
        "input_ids": torch.full((len(seqs), width), tok.pad_token_id),
        "attention_mask": torch.zeros((len(seqs), width), dtype=torch.long),
        "labels": torch.full((len(seqs), width), -100),
    }
    for i, (seq, target) in enumerate(zip(seqs, targets, strict=True)):
        batch["input_ids"][i, : len(seq)] = torch.tensor(seq)
        batch["attention_mask"][i, : len(seq)] = 1
        batch["labels"][i, : len(target)] = torch.tensor(target)
    batch["pixel_values"] = torch.from_numpy(np.stack(prompts["pixel_values"]))
    return batch


def noisy_label(colour: str, rng: random.Random, p_correct: float) -> str:
    if rng.random() < p_correct:
        return colour
    return rng.choice([c for c in COLOURS if c != colour])


def pretrain(model, processor, train: list[dict], test: list[dict], images: dict[str, Image.Image]) -> None:
    rng = random.Random(SEED + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=PRETRAIN_LR, weight_decay=0.1)
    total = PRETRAIN_CLEAN_STEPS + PRETRAIN_NOISY_STEPS
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * max(0.0, 1 - s / total))
    t0 = time.time()
    for step in range(total):
        model.train()
        p_correct = 1.0 if step < PRETRAIN_CLEAN_STEPS else P_CORRECT
        rows = [train[rng.randrange(len(train))] for _ in range(PRETRAIN_BATCH)]
        answers = [noisy_label(row["answer"], rng, p_correct) for row in rows]
        batch = encode_batch(processor, [images[row["image"]] for row in rows], answers)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % PRETRAIN_LOG_EVERY == 0 or step in (PRETRAIN_CLEAN_STEPS - 1, total - 1):
            greedy = accuracy(model, processor, test, images, greedy=True)
            phase = "clean" if step < PRETRAIN_CLEAN_STEPS else "noisy"
            print(
                f"  pretrain step {step:4d} ({phase})  loss {loss.item():.4f}"
                f"  held-out greedy accuracy {greedy:.2f}  ({time.time() - t0:.0f}s)",
                flush=True,
            )
    model.eval()


@torch.no_grad()
def accuracy(model, processor, rows: list[dict], images: dict, samples: int = 8, greedy: bool = False) -> float:
    """Fraction of temperature-1 samples (or greedy answers) whose first word is the colour."""
    model.eval()
    samples = 1 if greedy else samples
    batch_images = [images[row["image"]] for row in rows for _ in range(samples)]
    answers = [row["answer"] for row in rows for _ in range(samples)]
    processor.tokenizer.padding_side = "left"
    enc = processor(
        images=batch_images, text=prompt_texts(processor, len(batch_images)), padding=True,
        add_special_tokens=False, return_tensors="pt",
    )
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    with torch.random.fork_rng():
        torch.manual_seed(0)
        out = model.generate(**enc, **sampling, max_new_tokens=8, pad_token_id=processor.tokenizer.pad_token_id)
    texts = processor.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return sum((t.split() or [""])[0].strip(".,").lower() == a for t, a in zip(texts, answers, strict=True)) / len(
        texts
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-root", type=Path, default=REPO_ROOT / "grpo_cli" / "assets")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    model_dir = args.out_root / "tiny-vlm"
    data_dir = args.out_root / "tiny-shapes-data"
    train, test = make_data(data_dir)
    images = {row["image"]: Image.open(data_dir / row["image"]).convert("RGB") for row in train + test}
    print(f"data: {len(train)} train / {len(test)} test images -> {data_dir}")

    processor = make_processor()
    model = make_model(processor)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, vocab {len(processor.tokenizer)}")
    pretrain(model, processor, train, test, images)

    tok = processor.tokenizer
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=8,
    )
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    print(f"saved -> {model_dir}")
    for name, rows in (("train", train), ("test", test)):
        sampled = accuracy(model, processor, rows, images)
        greedy = accuracy(model, processor, rows, images, greedy=True)
        print(f"{name}: accuracy at temperature 1 (8 samples/image) {sampled:.3f}, greedy {greedy:.3f}")


if __name__ == "__main__":
    main()
