"""grpo's patches of TRL (grpo_cli/training/hooks/): one list, in today's stacking order, every replaced name present
on the installed TRL, and on a TRL outside the verified range an optimisation skipped with one line and a feature
refused in one paragraph (the version faked where every check reads it, `trl_compat.installed`)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from grpo_cli import trl_compat
from grpo_cli.training.hooks import HOOKS
from tests.conftest import ROOT, run_cli

DEMO = ROOT / "recipes" / "demo.yaml"
SHORT = ["training.max_steps=1", "training.per_device_train_batch_size=8", "training.num_generations=4",
         "training.max_completion_length=8", "eval.before_after=false"]


def _resolve(qualified: str) -> object:
    """The object a dotted name points to: the longest importable module prefix, then attributes."""
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            target = getattr(target, attr)
        return target
    raise ImportError(qualified)


def test_the_hooks_stack_in_the_order_the_trainer_applied_them() -> None:
    # The line order training/trainer.py had before the list (the merged adapter and compiled decode after the
    # prefill, which they wrap): a later hook wraps an earlier one on the same method.
    assert [(h.name, h.stage, h.trainer) for h in HOOKS] == [
        ("vllm_cpu", "before_build", "sync"), ("resumable_sampler", "before_build", "sync"),
        ("async_cpu", "before_build", "async"), ("shared_prompt_forward", "built", "sync"),
        ("fused_is", "built", "sync"), ("step_timing", "built", "sync"),
        ("shared_prefill", "built", "sync"), ("merged_generation", "built", "sync"),
        ("compiled_decode", "built", "sync"), ("dynamic_sampling", "built", "sync"),
        ("zero_advantage", "built", "sync"), ("rollout_worker", "built", "async")]
    assert {h.kind for h in HOOKS} <= {"optimisation", "measurement", "feature"}


def test_every_replaced_name_exists_on_the_installed_trl() -> None:
    assert trl_compat.is_verified(trl_compat.installed()), "CI installs a TRL inside the verified range"
    for hook in HOOKS:
        assert (ROOT / "grpo_cli" / hook.module).is_file(), hook.module
        for name in hook.replaces:
            assert callable(_resolve(name)), f"{hook.name}: {name}"


def test_pyproject_accepts_the_verified_range_alone() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.findall(r'"trl([^"]*)"', text) == [trl_compat.VERIFIED]


def test_async_trainer_is_imported_from_where_each_trl_keeps_it() -> None:
    assert trl_compat.async_home("1.16.0") == "trl.experimental.async_grpo"
    assert trl_compat.async_home("1.18.0") == "trl"
    config, trainer = trl_compat.async_classes()
    assert (config.__name__, trainer.__name__) == ("AsyncGRPOConfig", "AsyncGRPOTrainer")


def test_doctor_and_validate_name_an_untested_trl_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "hooks into TRL were verified" not in run_cli("validate", DEMO).output  # a verified TRL: nothing to say
    monkeypatch.setattr(trl_compat, "installed", lambda: "1.19.0")
    validate = run_cli("validate", DEMO)
    assert validate.exit_code == 0, validate.output
    lines = [line for line in validate.output.splitlines() if "TRL 1.19.0" in line]
    assert len(lines) == 1 and "trl>=1.16,<1.17" in lines[0], validate.output
    doctor = run_cli("doctor", "--json")
    notes = [n for n in json.loads(doctor.output)["notes"] if "TRL 1.19.0" in n]
    assert len(notes) == 1 and "trl>=1.16,<1.17" in notes[0]


@pytest.mark.parametrize(("version", "shown"), [("1.16.0rc1", "TRL 1.16.0rc1 is installed"),
                                               ("1.16.dev0", "TRL 1.16.dev0 is installed"),
                                               ("garbage", "TRL 'garbage' (not a version number) is installed"),
                                               ("", "TRL '' (not a version number) is installed")])
def test_a_prerelease_or_unreadable_trl_is_named_as_unverified(monkeypatch: pytest.MonkeyPatch, version: str,
                                                                shown: str) -> None:
    """Issue 46 sweep: TRL "1.16.0rc1" (before 1.16.0, as pip reads the range) counted as verified, its hooks
    patched; an empty version printed "TRL  is installed"."""
    monkeypatch.setattr(trl_compat, "installed", lambda: version)
    validate = run_cli("validate", DEMO)
    assert validate.exit_code == 0 and shown in " ".join(validate.output.split()), validate.output
    assert trl_compat.is_verified("1.16.1rc1") and trl_compat.is_verified("1.16.0+local")  # after 1.16.0


@pytest.mark.slow
def test_an_unverified_trl_skips_optimisations_and_refuses_a_feature(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trl_compat, "installed", lambda: "1.19.0")
    trained = run_cli("train", DEMO, *SHORT, "sampling.skip_zero_advantage=true", "-o", tmp_path / "skipped")
    assert trained.exit_code == 0, trained.output
    skipped = [line for line in trained.output.splitlines() if line.startswith("TRL 1.19.0 is outside")]
    assert [re.search(r"hook `(\w+)`", line).group(1) for line in skipped] == [  # type: ignore[union-attr]
        "step_timing", "shared_prefill", "zero_advantage"], trained.output
    metrics = [json.loads(line) for line in (tmp_path / "skipped" / "metrics.jsonl").read_text().splitlines()]
    logged = {k for record in metrics for k in record}
    assert not any(k.startswith(("time/", "zero_advantage/")) for k in logged)  # really left out

    refused = run_cli("train", DEMO, *SHORT, "sampling.dynamic={max_rounds: 2}", "-o", tmp_path / "refused")
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    text = " ".join(refused.output.split())
    assert "TRL 1.19.0" in text and "`dynamic_sampling`" in text and "sampling.dynamic" in text, refused.output
    assert "pip install 'trl>=1.16,<1.17'" in text
