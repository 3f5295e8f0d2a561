"""Environments and tools that raise, hang or exit: one paragraph naming the environment, the method and the row,
never TRL's traceback or a silent hang; a run that failed at step 0 does not block the corrected rerun.
Found by the reliability sweep of issue 25 (docs/reliability.md)."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli

pytestmark = pytest.mark.slow

ENVS = '''
import sys
import time


class Vault:
    """A vault whose behaviour is chosen by `mode`."""

    def __init__(self, mode: str = "ok"):
        if mode == "init":
            raise RuntimeError("no vault today")
        self.mode = mode

    def reset(self, **kwargs) -> str:
        if self.mode == "reset":
            raise ValueError("reset broke")
        if self.mode == "reset_hang":
            time.sleep(600)
        if self.mode == "reset_exit":
            sys.exit(4)
        if self.mode == "reset_dict":
            return {"board": [0, 0]}
        return " go"

    def try_code(self, code: str) -> str:
        """Try a code.

        Args:
            code: the code
        """
        if self.mode == "tool_exit":
            sys.exit(3)
        return "closed"

    def get_reward(self) -> float:
        if self.mode == "reward":
            raise KeyError("score")
        if self.mode == "reward_hang":
            time.sleep(600)
        if self.mode == "reward_str":
            return "high"
        return 0.5
'''


def _recipe(tmp_path: Path) -> Path:
    (tmp_path / "envs.py").write_text(ENVS, encoding="utf-8")
    rows = [{"question": f"open vault {i}", "answer": "open"} for i in range(8)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent("""
        model: {name_or_path: "bundled:tiny-tool"}
        data:
          files: data.jsonl
          shuffle: false
          prompt: {template: "{question}", chat: true}
        rewards: [{name: accuracy}]
        training: {num_generations: 2, per_device_train_batch_size: 2, max_steps: 1, max_completion_length: 8,
                   logging_steps: 1}
        eval: {before_after: false}
        launch: {profile: cpu}
        environment: {factory: envs.py:Vault, timeout: 1}
        """), encoding="utf-8")
    return path


def _flat(result) -> str:
    assert "Traceback" not in result.output, result
    return " ".join(result.output.split())


@pytest.mark.parametrize("mode,needles", [
    ("reset", ("environment Vault.reset raised ValueError: reset broke", "prompt is 'open vault 0'")),
    ("reset_hang", ("environment.timeout", "Vault.reset did not return within environment.timeout (1 s)")),
    ("reset_exit", ("Vault.reset called sys.exit(4)",)),
    ("reward", ("Vault.get_reward raised KeyError",)),
    ("reward_hang", ("Vault.get_reward did not return within environment.timeout (1 s)",)),
    ("reset_dict", ("Vault.reset returned dict", "must be a string (or None)", "prompt is 'open vault 0'")),
    ("reward_str", ("Vault.get_reward returned str 'high'", "must be a number")),
])
def test_check_tools_names_a_broken_reset_or_get_reward(tmp_path: Path, mode: str, needles: tuple[str, ...]) -> None:
    started = time.perf_counter()
    result = run_cli("check-tools", _recipe(tmp_path), f"environment.params.mode={mode}", "--no-model")
    assert result.exit_code == 1, result
    flat = _flat(result)
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{result.output}"
    assert "reset -> ''" not in flat  # a failed reset is not also shown as an empty observation
    assert time.perf_counter() - started < 120  # a hang guard: the 600 s sleeps were cut at the 1 s timeout


def test_check_tools_survives_a_tool_that_calls_sys_exit(tmp_path: Path) -> None:
    result = run_cli("check-tools", _recipe(tmp_path), "environment.params.mode=tool_exit", "--no-model")
    assert result.exit_code == 1, result
    assert "try_code called sys.exit(3)" in _flat(result)


@pytest.mark.parametrize("mode,where,needles", [
    ("init", "environment.factory", ("environment Vault (its constructor) raised RuntimeError: no vault today",)),
    ("reset_hang", "environment.timeout", ("Vault.reset did not return within environment.timeout (1 s)",
                                           "on the row whose prompt is 'open vault")),
    ("reward", "environment.factory", ("Vault.get_reward raised KeyError: 'score'", "prompt is 'open vault")),
    ("reset_dict", "environment.factory", ("Vault.reset returned dict", "must be a string (or None)")),
    ("reward_str", "environment.factory", ("Vault.get_reward returned str 'high'", "must be a number")),
])
def test_train_stops_with_a_paragraph_and_the_fixed_rerun_needs_no_flag(tmp_path: Path, mode: str, where: str,
                                                                        needles: tuple[str, ...]) -> None:
    recipe, out = _recipe(tmp_path), tmp_path / "out"
    started = time.perf_counter()
    failed = run_cli("train", recipe, f"environment.params.mode={mode}", "-o", out)
    assert failed.exit_code == 2, failed
    flat = _flat(failed)
    for needle in (where, *needles, "grpo check-tools"):
        assert needle in flat, f"{needle!r} not in:\n{failed.output}"
    assert "report not written" not in flat  # a step-0 failure has no curves: no stray line about them
    assert time.perf_counter() - started < 300
    if out.exists():
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "failed"
    # The corrected recipe reruns in the same directory: nothing to resume, so no --resume/--force demanded.
    fixed = run_cli("train", recipe, "-o", out)
    assert fixed.exit_code == 0, fixed
    assert "nothing to resume" in fixed.output or mode == "init"
    assert json.loads((out / "manifest.json").read_text())["status"] == "completed"


def test_a_tool_that_calls_sys_exit_is_a_counted_failure_in_training(tmp_path: Path) -> None:
    (tmp_path / "quitter.py").write_text(textwrap.dedent('''
        import sys


        def add(a: int, b: int) -> int:
            """Add two integers.

            Args:
                a: first
                b: second
            """
            sys.exit(3)
        '''), encoding="utf-8")
    out = tmp_path / "run"
    result = run_cli("train", RECIPES / "tools-demo.yaml", f"tools=[{{function: {tmp_path}/quitter.py:add}}]",
                     "training.max_steps=1", "training.per_device_train_batch_size=16", "training.num_generations=4",
                     "training.logging_steps=1", "eval.before_after=false", "-o", out)
    assert result.exit_code == 0, result
    stats = json.loads((out / "manifest.json").read_text())["tools"]["add"]
    # the pre-trained model calls `add` about half the time: 16 rollouts without a call are ~0.5**16 unlikely
    assert stats["calls"] > 0 and stats["failures"] == stats["calls"]
    assert "add called sys.exit(3)" in stats["last_error"]


def test_a_huge_tool_result_is_cut_before_it_reaches_the_model(tmp_path: Path) -> None:
    (tmp_path / "flood.py").write_text(textwrap.dedent('''
        def add(a: int, b: int) -> str:
            """Add two integers.

            Args:
                a: first
                b: second
            """
            return str(a + b) + " " + "x" * 5_000_000
        '''), encoding="utf-8")
    out = tmp_path / "run"
    result = run_cli("train", RECIPES / "tools-demo.yaml", f"tools=[{{function: {tmp_path}/flood.py:add}}]",
                     "training.max_steps=1", "training.per_device_train_batch_size=16", "training.num_generations=4",
                     "training.logging_steps=1", "eval.before_after=false", "-o", out)
    assert result.exit_code == 0, result
    stats = json.loads((out / "manifest.json").read_text())["tools"]["add"]
    assert stats["calls"] > 0 and stats["results_cut"] == stats["calls"]  # every 5 MB result was cut
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("tools/results_cut", 0) for r in logged) == stats["calls"]
    assert "tool_results_cut" in result.output  # the step line says so


def test_the_cut_keeps_the_start_and_says_how_long_the_result_was(tmp_path: Path) -> None:
    from grpo_cli.tools.guard import ToolStats, guard

    def echo(text: str) -> str:
        """Echo.

        Args:
            text: what to echo
        """
        return text

    stats = ToolStats()
    capped = guard(echo, name="echo", max_chars=100, stats=stats)
    short = capped(text="hello")
    long = capped(text="y" * 1000)
    assert short == "hello" and stats.cut == 1
    assert long.startswith("y" * 100) and "cut at 100 of 1,000 characters (max_result_chars)" in long
    assert guard(echo, name="echo", max_chars=None)(text="z" * 1000) == "z" * 1000
