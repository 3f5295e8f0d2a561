"""Health guards: silent GRPO failures are caught, recorded in health.jsonl, and (when set to) stop the run."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from tests.conftest import RECIPES, health_events, run_cli

DEMO = RECIPES / "demo.yaml"
FAST = ["training.max_steps=4", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]


def _guards(tmp_path: Path, *overrides: str) -> tuple[list[Any], io.StringIO]:
    from grpo_cli import load_recipe
    from grpo_cli.training.health_guards import health_callbacks

    buf = io.StringIO()
    console = Console(file=buf, width=300, highlight=False, color_system=None)
    return health_callbacks(load_recipe(DEMO, list(overrides)), tmp_path, console=console), buf


def _feed(guards: list[Any], logs: list[dict[str, Any]], out: Path) -> list[Any]:
    """Send logs to every guard as the Trainer would; return the control after each log."""
    from transformers import TrainerControl

    controls = []
    for step, record in enumerate(logs, start=1):
        control = TrainerControl()
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        for guard in guards:
            guard.on_log(SimpleNamespace(output_dir=str(out)), state, control, logs=dict(record))
        controls.append(control)
    return controls


def _log(**over: Any) -> dict[str, Any]:
    """A healthy training log shaped like TRL 1.16's (the demo's step-10 log)."""
    base = {"loss": 0.006, "grad_norm": 2.29, "learning_rate": 0.00425, "completions/mean_length": 1.92,
            "completions/clipped_ratio": 0.003, "rewards/accuracy/mean": 0.18, "rewards/accuracy/std": 0.37,
            "reward": 0.18, "reward_std": 0.37, "frac_reward_zero_std": 0.55, "entropy": 0.54}
    return {**base, **over}


def test_guards_are_on_by_default_and_bad_settings_are_recipe_errors(tmp_path: Path) -> None:
    from grpo_cli import load_recipe
    from grpo_cli.errors import RecipeError

    guards, _ = _guards(tmp_path)
    actions = {g.name: g.settings.action for g in guards}
    assert actions == {"nonfinite": "stop", "zero_std": "warn", "unscored_reward": "warn", "entropy": "warn",
                       "clipped": "warn", "flat_reward": "warn", "tool_failures": "warn", "no_tool_calls": "warn"}
    assert _guards(tmp_path, "health.enabled=false")[0] == []
    assert [g.name for g in _guards(tmp_path, "health.entropy.enabled=false")[0]].count("entropy") == 0
    with pytest.raises(RecipeError) as err:
        load_recipe(DEMO, ["health.zero_std.action=halt", "health.clipped.threshold=1.5"])
    assert "health.zero_std.action" in str(err.value) and "health.clipped.threshold" in str(err.value)


def test_a_healthy_run_fires_nothing(tmp_path: Path) -> None:
    # The demo's real trajectory over 60 steps: zero-std share rising, entropy falling, but healthy.
    logs = [_log(frac_reward_zero_std=z, entropy=e, reward=r, **{"rewards/accuracy/mean": r})
            for z, e, r in [(0.55, 0.54, 0.18), (0.76, 0.53, 0.16), (0.76, 0.45, 0.19), (0.82, 0.24, 0.26),
                            (0.86, 0.20, 0.23), (0.88, 0.15, 0.25)]]
    guards, printed = _guards(tmp_path)
    controls = _feed(guards, logs, tmp_path)
    assert not any(c.should_training_stop for c in controls)
    assert health_events(tmp_path) == [] and printed.getvalue() == ""
    assert all(g.reason == "" for g in guards)


@pytest.mark.parametrize(("guard", "bad", "metric"), [
    ("zero_std", {"frac_reward_zero_std": 1.0, "reward_std": 0.0}, "frac_reward_zero_std"),
    ("entropy", {"entropy": 0.001}, "entropy"),
    ("clipped", {"completions/clipped_ratio": 1.0}, "completions/clipped_ratio"),
    ("flat_reward", {"reward": 0.5, "rewards/accuracy/mean": 0.5}, "reward"),
    ("unscored_reward", {"rewards/nan/mean": None, "rewards/nan/std": None}, "rewards/nan/mean"),
    ("unscored_reward", {"rewards/nan": None}, "rewards/nan"),  # as TRL's async trainer logs it
    ("tool_failures", {"tools/call_frequency": 1.2, "tools/failure_frequency": 0.8}, "tools/failure_frequency"),
    ("no_tool_calls", {"tools/call_frequency": 0.0, "tools/failure_frequency": 0.0}, "tools/call_frequency"),
])
def test_each_guard_fires_once_after_its_window_and_rearms(tmp_path: Path, guard: str, bad: dict[str, Any],
                                                           metric: str) -> None:
    guards, printed = _guards(tmp_path, f"health.{guard}.window=3")
    good = {"rewards/accuracy/mean": 0.9, "rewards/nan/mean": 0.5, "rewards/nan": 0.5, "tools/call_frequency": 1.0,
            "tools/failure_frequency": 0.1}
    logs = [_log(**bad)] * 4 + [_log(reward=0.9, **good)] \
        + [_log(**bad)] * 3
    controls = _feed(guards, logs, tmp_path)
    events = health_events(tmp_path)
    assert [(e["step"], e["guard"], e["action"], e["metric"]) for e in events] == \
        [(3, guard, "warn", metric), (8, guard, "warn", metric)]
    assert "Try:" in events[0]["message"]
    assert f"health warn {guard} at step 3" in printed.getvalue()
    assert not any(c.should_training_stop for c in controls)  # warn never stops


def test_nan_grad_norm_stops_by_default_with_a_checkpoint_and_advice(tmp_path: Path) -> None:
    guards, printed = _guards(tmp_path, "training.learning_rate=0.005")
    controls = _feed(guards, [_log(), _log(grad_norm=math.nan, loss=math.inf)], tmp_path)
    assert not controls[0].should_training_stop
    assert controls[1].should_training_stop and controls[1].should_save  # the Trainer saves checkpoint-2
    (event,) = health_events(tmp_path)
    assert event["guard"] == "nonfinite" and event["action"] == "stop" and event["step"] == 2
    assert event["metric"] == "loss" and event["observed"] == "inf"
    reason = next(g.reason for g in guards if g.reason)
    assert "loss is inf" in reason and "training.learning_rate (now 0.005)" in reason
    assert f"{tmp_path / 'checkpoint-2'}" in reason and "--resume" in reason
    assert "health stop nonfinite at step 2" in printed.getvalue()


def _reward_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad_rewards.py"
    path.write_text("def const(completions, **kwargs):\n    return [1.0] * len(completions)\n\n\n"
                    "def nan(completions, **kwargs):\n    return [float('nan')] * len(completions)\n")
    return path


@pytest.mark.slow
def test_constant_reward_trips_zero_std_guard_and_stops_with_a_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "const"
    result = run_cli("train", DEMO, *FAST, f"rewards=[{{function: {_reward_file(tmp_path)}:const}}]",
                     "health.zero_std.window=2", "health.zero_std.action=stop", "-o", out)
    assert result.exit_code == 3, result.output
    assert "health stop zero_std at step 2" in result.output
    assert "stopped at step 2" in result.output and "training.num_generations (now 4)" in result.output
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert not (out / "model.safetensors").exists()  # a stopped run keeps the checkpoint, not a final model
    assert json.loads((out / "manifest.json").read_text())["status"] == "stopped"
    (event,) = health_events(out)
    assert (event["guard"], event["action"], event["step"], event["observed"]) == ("zero_std", "stop", 2, 1.0)
    assert (out / "report.png").exists()  # `grpo train` writes the report at the end of every run
    assert "**zero_std** (stop)" in (out / "report.md").read_text()


@pytest.mark.slow
def test_nan_reward_trips_the_nan_guard_with_default_settings(tmp_path: Path) -> None:
    from grpo_cli import load_recipe, train

    out = tmp_path / "nan"
    recipe = load_recipe(DEMO, [*FAST, f"rewards=[{{function: {_reward_file(tmp_path)}:nan}}]"])
    result = train(recipe, output_dir=out)
    assert result.status == "stopped" and result.global_step == 1
    assert "total reward is missing" in result.message and "Try:" in result.message
    (event,) = health_events(out)
    assert (event["guard"], event["metric"], event["observed"]) == ("nonfinite", "reward", None)
    assert (out / "checkpoint-1" / "trainer_state.json").exists()
