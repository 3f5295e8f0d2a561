"""A group's prompt through the loss forward once: TRL's log-probabilities, entropies and gradients, less compute.

The reference is TRL's own `_get_per_token_logps_and_entropies` on the real bundled model with TRL's fused LM head
and a trained LoRA adapter, in training mode; the training test runs `grpo train` twice on the same first step and
compares what TRL logs, which also pins the hook: if the installed TRL stops scoring through that method, the
callback sees no saved rows and it fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import MethodType

import pytest
import torch
from accelerate import Accelerator
from transformers import AutoTokenizer
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from grpo_cli.training.kept_mass import Truncation, captured_log_mass, language_model
from grpo_cli.training.shared_prompt_forward import share_prompt_forward
from tests.conftest import ROOT, run_cli
from tests.training.tiny_lora import MODEL, tiny_lora


class Scorer:
    """What TRL's method reads from its trainer (the accelerator's autocast), with TRL's method bound to it."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.accelerator = Accelerator(cpu=True)
        self._get_per_token_logps_and_entropies = MethodType(GRPOTrainer._get_per_token_logps_and_entropies, self)


def _model(dropout: float = 0.0) -> torch.nn.Module:
    return tiny_lora(dropout, lambda base: add_fused_lm_head(base, temperature=0.9, outputs=("log_probs", "entropy")))


def _batch(copies: int = 4) -> tuple[torch.Tensor, torch.Tensor, int]:
    """TRL's layout: left-padded repeated prompts, then completions padded after their end, rows shuffled."""
    tok = AutoTokenizer.from_pretrained(MODEL)
    tok.padding_side = "left"
    prompts = tok([p for p in ("3+5=", "12+19=", "7+0=") for _ in range(copies)], return_tensors="pt", padding=True)
    gen = torch.Generator().manual_seed(1)
    keep = 6
    completions = torch.randint(3, tok.vocab_size, (prompts.input_ids.size(0), keep), generator=gen)
    lengths = torch.randint(1, keep + 1, (completions.size(0),), generator=gen)
    completion_mask = (torch.arange(keep) < lengths[:, None]).long()
    order = torch.randperm(completions.size(0), generator=gen)
    ids = torch.cat([prompts.input_ids, completions], dim=1)[order]
    mask = torch.cat([prompts.attention_mask, completion_mask], dim=1)[order]
    return ids, mask, keep


def _score(scorer: Scorer, ids: torch.Tensor, mask: torch.Tensor, keep: int, chunk: int | None = None):  # type: ignore[no-untyped-def]
    scorer.model.zero_grad()
    logps, entropy, _ = scorer._get_per_token_logps_and_entropies(scorer.model, ids, mask, keep, chunk,
                                                                  compute_entropy=True)
    weights = mask[:, -keep:].float() * torch.linspace(-1, 1, ids.size(0))[:, None]  # advantages of either sign
    (logps * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in scorer.model.named_parameters() if p.grad is not None}
    return logps.detach(), entropy.detach(), grads


@pytest.mark.parametrize("chunk", [None, 5])
def test_the_same_log_probs_entropies_and_gradients_as_trl(chunk: int | None) -> None:
    scorer = Scorer(_model())
    ids, mask, keep = _batch()
    trl_logps, trl_entropy, trl_grads = _score(scorer, ids, mask, keep, chunk)
    shared = share_prompt_forward(scorer)
    logps, entropy, grads = _score(scorer, ids, mask, keep, chunk)
    assert shared.calls == (1 if chunk is None else 3) and shared.rows_saved > 0
    assert shared.checked is True  # the first shared chunk agreed with TRL's own forward
    assert chunk is not None or shared.rows_saved == 9  # 12 rows, 3 prompts
    scored = mask[:, -keep:].bool()
    assert torch.allclose(logps[scored], trl_logps[scored], atol=1e-5), (logps - trl_logps).abs().max()
    assert torch.allclose(entropy[scored], trl_entropy[scored], atol=1e-5)
    assert (logps[~scored] == 0).all() and (trl_logps[~scored] == 0).all()
    assert grads.keys() == trl_grads.keys() and len(grads) > 0
    for name, grad in grads.items():  # float32 sums in another order: each tensor within 1e-4 of its own size
        assert (grad - trl_grads[name]).norm() <= 1e-4 * trl_grads[name].norm(), name


def test_the_kept_mass_of_truncated_sampling_reads_the_completion_pass_alone() -> None:
    """With vLLM and top_p < 1, fused_is renormalises the trainer's log-probs over the kept tokens, from the hidden
    states captured during the loss forward: the shared prompt pass and the one-time check are left out, so the
    capture holds one row per completion, as with TRL's forward."""
    scorer = Scorer(_model())
    ids, mask, keep = _batch()
    truncation = Truncation(temperature=0.9, top_p=0.8)
    lm = language_model(scorer, scorer.model)
    with torch.no_grad(), captured_log_mass(lm, truncation, keep) as trl_mass:
        scorer._get_per_token_logps_and_entropies(scorer.model, ids, mask, keep)
    shared = share_prompt_forward(scorer)
    with torch.no_grad(), captured_log_mass(lm, truncation, keep) as mass:
        scorer._get_per_token_logps_and_entropies(scorer.model, ids, mask, keep)
    assert shared.calls == 1 and shared.checked is True
    scored = mask[:, -keep:].bool()
    assert mass[0].shape == trl_mass[0].shape == (ids.size(0), keep)
    assert torch.allclose(mass[0][scored], trl_mass[0][scored], atol=1e-5)
    assert (trl_mass[0][scored] < 0).all()  # top_p 0.8 really dropped mass: log S < 0


def test_left_to_trl_where_sharing_could_change_the_estimate() -> None:
    ids, mask, keep = _batch()
    dropped = Scorer(_model(dropout=0.1))  # one mask per completion in TRL's forward
    shared = share_prompt_forward(dropped)
    _score(dropped, ids, mask, keep)
    assert shared.calls == 0
    plain = Scorer(_model())
    shared = share_prompt_forward(plain)
    ids, mask, keep = _batch(copies=1)  # one completion per prompt: nothing to share
    _score(plain, ids, mask, keep)
    assert shared.calls == 0 and shared.rows_saved == 0


def test_validate_refuses_it_where_it_would_change_the_update() -> None:
    smollm2 = ROOT / "recipes" / "smollm2-word-arith.yaml"
    assert run_cli("validate", smollm2, "sampling.share_prompt_forward=true").exit_code == 0
    ddp = run_cli("validate", smollm2, "sampling.share_prompt_forward=true", "launch.profile=ddp")
    assert ddp.exit_code == 0 and "proven on one process only" in " ".join(ddp.output.split())  # TRL's forward
    for override, needle in (("training.gradient_checkpointing=true", "gradient checkpointing"),
                             ("model.lora.dropout=0.1", "dropout mask"),
                             ("launch.vllm.mode=async", "AsyncGRPOTrainer")):
        result = run_cli("validate", smollm2, "sampling.share_prompt_forward=true", override)
        assert result.exit_code == 2 and needle in " ".join(result.output.split()), (override, result.output)
        assert "sampling.share_prompt_forward" in result.output


def _train(tmp_path: Path, name: str, share: bool) -> dict[str, float]:
    out = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "train", str(ROOT / "recipes" / "demo.yaml"), "training.max_steps=1",
         "training.logging_steps=1", "eval.before_after=false", f"sampling.share_prompt_forward={str(share).lower()}",
         f"output.dir={out}", "--force"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if "grad_norm" in r)


@pytest.mark.slow
def test_grpo_train_takes_the_same_first_step_with_one_prompt_forward_per_group(tmp_path: Path) -> None:
    plain, shared = _train(tmp_path, "plain", False), _train(tmp_path, "shared", True)
    assert plain["reward"] == shared["reward"]  # the same completions were sampled and scored
    assert "shared_prompt_forward/rows_saved" not in plain and shared["shared_prompt_forward/rows_saved"] > 0
    assert plain["grad_norm"] > 0
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    assert shared["loss"] == pytest.approx(plain["loss"], rel=1e-4, abs=1e-6)
