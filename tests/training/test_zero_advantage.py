"""`sampling.skip_zero_advantage`: completions with advantage exactly 0 skip forward and backward, same update.

Each test really trains the bundled tiny model twice from the same seed, with and without the skip, and compares
every parameter; the runs are made to contain zero-std groups (low temperature), and the skip is checked to have
happened (`zero_advantage/skipped` > 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "demo.yaml"
STEPS = ["training.max_steps=2", "training.per_device_train_batch_size=16", "training.num_generations=4",
         "training.logging_steps=1", "eval.before_after=false"]


def _train(out: Path, *overrides: str) -> dict:
    from safetensors.torch import load_file

    from grpo_cli import load_recipe, train

    result = train(load_recipe(DEMO, [*STEPS, *overrides]), output_dir=out)
    assert result.status == "completed"
    return load_file(str(out / "model.safetensors"))


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


# SGD shows the gradient itself (dapo needs no rescaling: bit-identical); AdamW divides by the gradient's size, so a
# parameter whose true gradient is 0 (k_proj's bias: softmax ignores a shift of every key) turns float noise of
# 1e-10 into a step of ~1e-7 in both runs alike: compared to 1e-6.
@pytest.mark.parametrize(("loss_type", "temperature", "accumulation", "optim"), [
    ("dapo", "0.5", "1", "sgd"),          # normalised by num_items_in_batch: nothing to rescale
    ("dapo", "0.5", "1", "adamw_torch"),  # the demo's own optimizer
    ("grpo", "0.5", "2", "sgd"),          # mean over completions: rescaled; two micro-batches per step
    ("bnpo", "0.5", "1", "sgd"),          # mean over the micro-batch's tokens: rescaled
    ("dapo", "chat", "1", "adamw_torch"),  # chat prompts the model never saw: every reward 0, no forward at all
])
def test_skipping_zero_advantage_completions_gives_the_same_parameters(
        tmp_path: Path, loss_type: str, temperature: str, accumulation: str, optim: str) -> None:
    import torch

    prompt = "data.prompt.chat=true" if temperature == "chat" else f"training.temperature={temperature}"
    common = [f"training.loss_type={loss_type}", prompt,
              f"training.gradient_accumulation_steps={accumulation}", f"training.optim={optim}"]
    full = _train(tmp_path / "full", *common)
    skipped = _train(tmp_path / "skip", *common, "sampling.skip_zero_advantage=true")
    shares = [r["zero_advantage/skipped"] for r in _records(tmp_path / "skip") if "zero_advantage/skipped" in r]
    assert shares and max(shares) > 0, "no completion had a zero advantage: the test proves nothing"
    if temperature == "chat":
        assert max(shares) == 1.0, shares  # a micro-batch with nothing to learn: the zero loss path ran
    assert not any("zero_advantage/skipped" in r for r in _records(tmp_path / "full"))
    for name, value in full.items():
        if loss_type == "dapo" and optim == "sgd":
            assert torch.equal(value, skipped[name]), name
        assert torch.allclose(value, skipped[name], rtol=0, atol=1e-6), name
    moved = [n for n in full if not torch.equal(full[n], _initial()[n])]
    if temperature != "chat":
        assert moved, "training moved no weight"


def _train_two_processes(out: Path, *overrides: str) -> dict:
    """The demo on 2 CPU processes (the ddp profile, gloo), launched as users launch it; its parameters."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    from tests.conftest import ROOT

    cmd = [sys.executable, "-m", "grpo_cli", "train", str(DEMO), "--profile", "ddp", "--num-processes", "2",
           "-o", str(out), *STEPS, *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return load_file(str(out / "model.safetensors"))


# DDP averages the two processes' gradients; each process's skipped loss has its full loss's gradient, so the
# average is the same. "chat": every reward 0, so no micro-batch on either process has a live completion.
@pytest.mark.parametrize("prompt", ["training.temperature=0.5", "data.prompt.chat=true"])
def test_the_skip_gives_the_same_parameters_on_two_processes(tmp_path: Path, prompt: str) -> None:
    import torch

    common = [prompt, "training.optim=sgd"]
    full = _train_two_processes(tmp_path / "full", *common)
    skipped = _train_two_processes(tmp_path / "skip", *common, "sampling.skip_zero_advantage=true")
    shares = [r["zero_advantage/skipped"] for r in _records(tmp_path / "skip") if "zero_advantage/skipped" in r]
    assert shares and max(shares) > 0, "no completion had a zero advantage: the test proves nothing"
    if prompt.startswith("data.prompt.chat"):
        assert max(shares) == 1.0, shares
    for name, value in full.items():
        assert torch.allclose(value, skipped[name], rtol=0, atol=1e-6), name
    if not prompt.startswith("data.prompt.chat"):
        assert any(not torch.equal(full[n], _initial()[n]) for n in full), "training moved no weight"


def _initial() -> dict:
    from safetensors.torch import load_file

    from tests.conftest import ROOT

    return load_file(str(ROOT / "grpo_cli" / "assets" / "tiny-arith" / "model.safetensors"))


def test_validate_refuses_the_skip_where_the_gradient_is_not_exactly_zero() -> None:
    result = run_cli("validate", DEMO, "sampling.skip_zero_advantage=true", "training.beta=0.04",
                     "training.loss_type=vespo")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "sampling.skip_zero_advantage: the KL term gives every completion a gradient" in text
    assert "Set training.beta: 0." in text and "loss_type 'vespo'" in text
    assert "Traceback" not in result.output
    ok = run_cli("validate", DEMO, "sampling.skip_zero_advantage=true")
    assert ok.exit_code == 0, ok.output
    assert "zero-advantage skip" in ok.output


def test_the_trainer_refuses_the_skip_when_its_loss_is_not_exact() -> None:
    from types import SimpleNamespace

    from grpo_cli.errors import GrpoError
    from grpo_cli.training.zero_advantage import attach_zero_advantage_skip, skip_problems

    exact = SimpleNamespace(beta=0.0, _entropy_bonus_enabled=False, aux_loss_enabled=False, top_entropy_quantile=1.0,
                            off_policy_mask_threshold=None, loss_type="dapo", compute_loss=lambda *a: None)
    assert skip_problems(exact) == []
    entropy = SimpleNamespace(**{**vars(exact), "_entropy_bonus_enabled": True})
    with pytest.raises(GrpoError, match="entropy bonus is on"):
        attach_zero_advantage_skip(entropy)
