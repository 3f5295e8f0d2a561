"""A GRPO group's prompt is prefilled once: the same tokens and log-probabilities, less compute, only where exact.

The comparisons run the real bundled model with a real LoRA adapter in training mode (as TRL generates inside a
step); the training test runs a real `grpo train` whose recipe callback reads what the shared prefill saved, which
also pins the hook: if the installed TRL stops calling `model.generate` with plain prompt tensors, it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, GenerationConfig

from grpo_cli.training.shared_prefill import OFF_ENV, share_prompt_prefill
from tests.training.tiny_lora import MODEL, tiny_lora

ROOT = Path(__file__).resolve().parents[2]


def _batch(groups: int = 3, copies: int = 4) -> dict[str, torch.Tensor]:
    tok = AutoTokenizer.from_pretrained(MODEL)
    tok.padding_side = "left"
    prompts = [p for p in ("3+5=", "12+19=", "7+0=")[:groups] for _ in range(copies)]  # TRL repeats each prompt
    enc = tok(prompts, return_tensors="pt", padding=True)
    return {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask}


def _sample(model, batch, seed: int = 1):  # type: ignore[no-untyped-def]
    config = GenerationConfig(max_new_tokens=6, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0,
                              return_dict_in_generate=True, output_logits=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**batch, generation_config=config)
    logprobs = torch.stack(out.logits, dim=1).log_softmax(-1)
    new = out.sequences[:, batch["input_ids"].shape[1]:]
    return out.sequences, logprobs.gather(-1, new.unsqueeze(-1)).squeeze(-1)


def test_the_same_tokens_and_log_probs_with_one_prefill_per_prompt() -> None:
    model, batch = tiny_lora(), _batch()
    tokens, logprobs = _sample(model, batch)
    shared = share_prompt_prefill(model)
    assert shared is not None
    tokens_after, logprobs_after = _sample(model, batch)
    assert shared.calls == 1 and shared.rows_saved == 9  # 12 rows, 3 prompts
    assert torch.equal(tokens, tokens_after)
    assert torch.allclose(logprobs, logprobs_after, atol=1e-5), (logprobs - logprobs_after).abs().max()


def test_left_alone_where_sharing_could_change_the_samples() -> None:
    dropped = tiny_lora(dropout=0.1)  # each copy would get its own dropout mask
    shared = share_prompt_prefill(dropped)
    assert shared is not None
    _sample(dropped, _batch())
    assert shared.calls == 0
    model = tiny_lora()
    shared = share_prompt_prefill(model)
    assert shared is not None
    _sample(model, _batch(groups=3, copies=1))  # no prompt repeats
    with torch.no_grad():  # anything beyond the prompt tensors and the config (an image's pixels, say): left alone
        model.generate(**_batch(), max_new_tokens=2, pad_token_id=0)
    assert shared.calls == 0


def test_turned_off_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OFF_ENV, "0")
    model = tiny_lora()
    generate = model.generate
    assert share_prompt_prefill(model) is None and model.generate == generate


CALLBACK = """
import json
from transformers import TrainerCallback

class Saved(TrainerCallback):
    def __init__(self, out):
        self.out = out

    def on_train_end(self, args, state, control, model=None, **kwargs):
        shared = getattr(model.generate, "__self__", None)
        with open(self.out, "w") as fh:
            json.dump({"calls": getattr(shared, "calls", 0), "rows_saved": getattr(shared, "rows_saved", 0)}, fh)
"""


@pytest.mark.slow
def test_grpo_train_prefills_each_prompt_of_a_group_once(tmp_path: Path) -> None:
    (tmp_path / "saved.py").write_text(CALLBACK)
    out = tmp_path / "saved.json"
    env = {k: v for k, v in os.environ.items() if k != OFF_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "train", str(ROOT / "recipes" / "demo.yaml"), "training.max_steps=2",
         "eval.before_after=false", f"output.dir={tmp_path / 'run'}",
         f"callbacks=[{{callback: '{tmp_path / 'saved.py'}:Saved', params: {{out: '{out}'}}}}]", "--force"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    saved = json.loads(out.read_text())
    # the demo: 8 prompts x 8 completions a step, so 56 of 64 rows a step need no prefill of their own
    assert saved == {"calls": 2, "rows_saved": 2 * 56}, saved
