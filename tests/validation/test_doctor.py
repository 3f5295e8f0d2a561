"""`grpo doctor` and validate's environment part: versions and devices are faked through the inputs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from grpo_cli.findings import Findings
from grpo_cli.recipe import load_recipe
from grpo_cli.validation.doctor import Device, TorchBuild, diagnose
from grpo_cli.validation.environment import CORE, WINDOWS, recipe_needs, recipe_problems
from tests.conftest import RECIPES, run_cli

DEMO = RECIPES / "demo.yaml"
GOOD = {"transformers": "5.23.0", "trl": "1.16.0", "peft": "0.21.2", "accelerate": "1.15.0", "datasets": "5.2.0"}
CUDA = TorchBuild("2.9.0+cu128", cuda="12.8", nccl="2.27.3")
H100 = Device(0, "NVIDIA H100 80GB HBM3", 79.2, (9, 0))
V100 = Device(0, "Tesla V100-SXM2-32GB", 31.7, (7, 0))
VLLM = ["launch.profile=single", "launch.vllm.mode=colocate"]


def _needs(*overrides: str):
    return recipe_needs(load_recipe(DEMO, list(overrides)))


def test_a_good_cuda_box_is_ready() -> None:
    report = diagnose({**GOOD, "vllm": "0.24.0+cu129"}, CUDA, [H100], needs=_needs(*VLLM))
    assert report.ok, report.problems
    assert next(c for c in report.checks if c.name == "vllm").status == "ok"  # local segment ignored, as TRL does


def test_a_too_new_vllm_fails_only_a_recipe_that_uses_it() -> None:
    versions = {**GOOD, "vllm": "0.33.0"}
    report = diagnose(versions, CUDA, [H100], needs=_needs(*VLLM))
    assert not report.ok
    assert "launch.vllm.mode=colocate" in report.problems[0] and "pip install 'vllm>=0.22.0,<=0.31.0'" in \
        report.problems[0]
    unused = diagnose(versions, CUDA, [H100], needs=_needs())
    assert unused.ok and next(c for c in unused.checks if c.name == "vllm").status == "incompatible"


def test_core_libraries_are_always_needed() -> None:
    report = diagnose({**GOOD, "transformers": "4.57.1", "datasets": None}, CUDA, [H100])
    assert not report.ok
    assert any(p.startswith("transformers: 4.57.1 is outside >=5.0") for p in report.problems)
    assert any(p.startswith("datasets: is not installed") and "pip install 'datasets>=4.7.0'" in p
               for p in report.problems)


def test_gpu_features_the_recipe_uses() -> None:
    quant = _needs("launch.profile=single", "model.lora.r=8", "model.quantization=4bit")
    cpu_build = diagnose({**GOOD, "bitsandbytes": "0.48.1"}, TorchBuild("2.13.0+cpu"), [], needs=quant)
    assert any("needs a CUDA GPU" in p and "CUDA build of torch" in p for p in cpu_build.problems)
    assert diagnose({**GOOD, "bitsandbytes": "0.48.1"}, CUDA, [H100], needs=quant).ok
    bf16 = _needs("launch.profile=single", "model.dtype=bfloat16")
    assert any("bf16" in p and "V100" in p for p in diagnose(GOOD, CUDA, [V100], needs=bf16).problems)
    assert diagnose(GOOD, CUDA, [H100], needs=bf16).ok
    assert diagnose(GOOD, TorchBuild("2.13.0+cpu"), []).ok  # the CPU demo needs no GPU


def test_validate_part_reads_metadata_only_and_names_the_recipe_key() -> None:
    recipe = load_recipe(DEMO, VLLM)
    problems = recipe_problems(recipe, {"vllm": "0.33.0"}).problems
    assert [p.where for p in problems] == ["launch.vllm.mode"] and "0.33.0" in problems[0].what
    found = recipe_problems(recipe, {"vllm": None})
    assert not found.problems and "not installed here" in found.warnings[0]
    assert recipe_problems(load_recipe(DEMO), {}) == Findings()
    batching = load_recipe(DEMO, ["training.use_transformers_continuous_batching=true"])
    problems = recipe_problems(batching, {"transformers": "5.7.0"}).problems
    assert problems[0].where == "training.use_transformers_continuous_batching" and ">=5.8.0" in problems[0].what
    assert recipe_problems(batching, {"transformers": "5.23.0"}) == Findings()


def test_windows_match_the_installed_trl() -> None:
    """The shipped windows are TRL 1.16's: its Requires-Dist and its vLLM/liger import checks."""
    reqs = {}
    for text in importlib.metadata.requires("trl") or []:
        req = Requirement(text)
        reqs.setdefault(req.name, str(req.specifier))
    for name in ("accelerate", "datasets", "deepspeed", "bitsandbytes", "liger-kernel"):
        assert set(WINDOWS[name].spec.split(",")) == set(reqs[name].split(",")), name
    assert set(reqs["vllm"].split(",")) == {">=0.22.0", "<=0.31.0"} == set(WINDOWS["vllm"].spec.split(","))
    source = Path(importlib.util.find_spec("trl.import_utils").origin).read_text(encoding="utf-8")
    assert 'Version("0.22.0") <= _vllm_base_version <= Version("0.31.0")' in source
    assert 'LIGER_KERNEL_MIN_VERSION = "0.8.2"' in source
    for name in ("transformers", "peft"):  # grpo's floor is at least TRL's
        from packaging.specifiers import SpecifierSet
        assert SpecifierSet(reqs[name]).contains(WINDOWS[name].spec.removeprefix(">="))


def test_doctor_command_on_this_machine() -> None:
    result = run_cli("doctor", "--json")
    report = json.loads(result.output)
    assert result.exit_code == (0 if report["ok"] else 1)
    assert {c["name"] for c in report["checks"]} >= {*CORE, "python", "vllm", "flash-attn", "liger-kernel"}
    assert report["torch"].startswith(importlib.metadata.version("torch"))


def test_doctor_with_a_recipe_exits_1_when_it_needs_what_is_missing() -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("only meaningful where vLLM is absent (CI): then the vLLM recipe cannot run here")
    result = run_cli("doctor", DEMO, *VLLM)
    assert result.exit_code == 1 and "vllm" in result.output and "pip install" in result.output


def test_doctor_is_not_ready_for_a_recipe_validate_rejects(tmp_path: Path) -> None:
    good = run_cli("doctor", DEMO)
    bad = run_cli("doctor", DEMO, "data.files.train=missing.jsonl")
    assert "Traceback" not in bad.output
    assert bad.exit_code == 1, bad.output
    flat = " ".join(bad.output.split())
    assert "does not pass `grpo validate`" in flat and "missing.jsonl" in flat
    assert "ready" not in bad.output.splitlines()[-1]
    assert "does not pass" not in good.output  # the same machine, a valid recipe: no such problem
