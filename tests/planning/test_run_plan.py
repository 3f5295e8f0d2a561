"""The run plan: each launch decision of a `grpo train` is made once, before the run starts, and the packages that
run it (training, launching, evaluation) read the plan instead of importing validation's rules."""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

DEMO = RECIPES / "demo.yaml"
FAST = ["training.max_steps=2", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]
DECISIONS = ("choose_backend", "thread_plan", "resolve_num_processes")


def _count_decisions(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Wrap the real deciders wherever grpo's loaded modules hold them (their own modules included, so a module
    imported later binds the wrapper too): each call is counted and still runs the real function."""
    import grpo_cli.cli.train
    import grpo_cli.train_command
    import grpo_cli.training.run  # noqa: F401  (loaded, so its bindings are wrapped too)
    from grpo_cli.planning import generation_choice, topology

    calls: Counter[str] = Counter()
    real = {"choose_backend": generation_choice.choose_backend, "thread_plan": topology.thread_plan,
            "resolve_num_processes": topology.resolve_num_processes}

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for name, fn in real.items():
        wrapped = counting(name, fn)
        for module in [m for n, m in sys.modules.items() if n.startswith("grpo_cli") and m is not None]:
            for attr, value in list(vars(module).items()):
                if value is fn:
                    monkeypatch.setattr(module, attr, wrapped)
    return calls


@pytest.mark.slow
def test_grpo_train_makes_each_launch_decision_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_decisions(monkeypatch)
    out = tmp_path / "run"
    result = run_cli("train", DEMO, *FAST, "launch.vllm.mode=auto", "-o", out)
    assert result.exit_code == 0, result.output
    assert (out / "model.safetensors").is_file()  # it really trained and saved
    assert {name: calls[name] for name in DECISIONS} == dict.fromkeys(DECISIONS, 1)


def test_a_relaunching_grpo_train_decides_once_and_hands_its_choices_to_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent of a ddp run decides; the workers get its choices on their command line and in their environment
    (accelerate is not started: what the workers are given is what this test reads)."""
    from grpo_cli.launching import relaunch
    from grpo_cli.train_command import TrainRequest, run_train_command

    for var in ("LOCAL_RANK", "ACCELERATE_LAUNCHED", relaunch.RELAUNCHED_ENV):
        monkeypatch.delenv(var, raising=False)
    calls = _count_decisions(monkeypatch)
    seen: dict[str, Any] = {}
    monkeypatch.setattr(relaunch, "run_forwarding_signals", lambda cmd, env: seen.update(cmd=cmd, env=env) or 0)
    request = TrainRequest(recipe=DEMO, overrides=["launch.vllm.mode=auto"], output_dir=tmp_path / "run",
                           launch={"profile": "ddp", "num_processes": 2})
    assert run_train_command(request) == (0, None)
    assert {name: calls[name] for name in DECISIONS} == dict.fromkeys(DECISIONS, 1)
    workers = [a for a in seen["cmd"] if a.startswith("launch.vllm.mode=")]
    assert workers and workers[-1] != "launch.vllm.mode=auto"  # auto's choice, made in the parent, read by them
    assert seen["env"]["OMP_NUM_THREADS"].isdigit()  # each worker's share of the cores, decided in the parent


def test_validate_json_carries_the_run_plan_its_lines_are_read_from() -> None:
    import json

    result = run_cli("validate", DEMO, "--json", "--profile", "ddp", "--num-processes", "2", "--threads", "1")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    run = out["run_plan"]
    assert run["processes"] == 2 and out["plan"]["launch"].startswith(run["processes_why"])
    assert run["batches"]["per_device"] == 64 and out["plan"]["completions per micro-step"] == "128 (64 per device x 2)"
    assert run["threads"]["torch_threads"] == 1 and run["threads"]["reason"] == "launch.threads"


def test_the_python_train_refuses_what_validate_refuses_before_anything_is_written(tmp_path: Path) -> None:
    from grpo_cli import RecipeError, load_recipe, preflight, train

    recipe = load_recipe(DEMO, ["training.num_generations=7"])  # 64 completions a step are not groups of 7
    assert not preflight(recipe).ok
    with pytest.raises(RecipeError) as info:
        train(recipe, output_dir=tmp_path / "run")
    assert "num_generations" in info.value.render()
    assert not (tmp_path / "run").exists()
    with pytest.raises(RecipeError) as info:  # review of issue 49: a plan given skipped the checks; TRL refused
        train(recipe, preflight(recipe).run, output_dir=tmp_path / "run")  # it only after the model had loaded
    assert "num_generations" in info.value.render()
    assert not (tmp_path / "run").exists()


def test_the_python_train_refuses_a_plan_made_for_another_recipe(tmp_path: Path) -> None:
    """Review of issue 49: `train(recipe, plan)` trained the plan's recipe, so a plan of another recipe (three
    steps, say) silently trained that one instead; the backend `auto` chose is the one difference allowed."""
    from grpo_cli import GrpoError, load_recipe, preflight, train

    recipe = load_recipe(DEMO, ["training.max_steps=2", "launch.vllm.mode=auto", "eval.before_after=false"])
    other = load_recipe(DEMO, ["training.max_steps=3", "launch.vllm.mode=auto", "eval.before_after=false"])
    with pytest.raises(GrpoError) as info:
        train(recipe, preflight(other).run, output_dir=tmp_path / "other")
    assert "training.max_steps differ" in info.value.render() and not (tmp_path / "other").exists()
    result = train(recipe, preflight(recipe).run, output_dir=tmp_path / "run")
    assert result.status == "completed" and (tmp_path / "run" / "model.safetensors").is_file()


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_training_launching_and_evaluation_import_nothing_from_validation() -> None:
    """They read the run plan (grpo_cli.planning); validation only checks and reports (any import counts, a lazy
    or type-checking one too)."""
    found = sorted(f"{path.relative_to(ROOT)}: {name}"
                   for package in ("training", "launching", "evaluation")
                   for path in (ROOT / "grpo_cli" / package).rglob("*.py")
                   for name in _imports(path)
                   if name == "grpo_cli.validation" or name.startswith("grpo_cli.validation."))
    assert found == []
