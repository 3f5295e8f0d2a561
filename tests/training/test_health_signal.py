"""Guards that read the learning signal, each on a run made to trigger it: `reward_gaming` (a reward that pays for
wrong sums, so the task metric falls while the reward rises) and the end-of-run `bottleneck` advice (a reward that
sleeps, so scoring dominates the step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

pytestmark = pytest.mark.slow

DATA = str(ROOT / "grpo_cli" / "assets" / "tiny-arith-data")
DEMO_REWARD = "  - name: accuracy\n    params: {answer_format: first_number}\n"


def _recipe(tmp_path: Path, reward: str, code: str, eval_text: str, steps: int) -> Path:
    text = (RECIPES / "demo.yaml").read_text().replace("bundled:tiny-arith-data", DATA)
    text = text.replace(DEMO_REWARD, reward).replace("max_steps: 200", f"max_steps: {steps}")
    text = text.replace("logging_steps: 20", "logging_steps: 5")
    text = text[:text.index("eval:")] + eval_text + text[text.index("launch:"):]
    (tmp_path / "rewards.py").write_text(code)
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


WRONG = '''from grpo_cli.rewards.builtins.answers import accuracy


def wrong(completions, answer, **kw):
    return [1.0 - r for r in accuracy(completions, answer=answer, answer_format="first_number")]
'''
TASK_EVAL = """eval:
  every_steps: 10
  max_samples: 40
  num_generations: 8
  rewards:
    - name: accuracy
      params: {answer_format: first_number}

"""


def test_reward_gaming_fires_when_the_task_falls_as_the_reward_rises(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "  - {function: rewards.py:wrong}\n", WRONG, TASK_EVAL, 40)
    out = tmp_path / "out"
    result = run_cli("train", recipe, "-o", out)
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines()]
    gaming = [e for e in events if e["guard"] == "reward_gaming"]
    assert gaming, events
    event = gaming[0]
    assert event["metric"] == "task/eval/accuracy" and event["action"] == "warn"
    assert "fell from" in event["message"] and "while the training reward rose from" in event["message"]
    assert "health warn reward_gaming" in result.output
    assert "reward_gaming" in (out / "report.md").read_text()


def test_reward_gaming_stays_quiet_when_reward_and_task_agree(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, DEMO_REWARD, "", TASK_EVAL, 40)
    out = tmp_path / "out"
    result = run_cli("train", recipe, "-o", out)
    assert result.exit_code == 0, result.output
    health = out / "health.jsonl"
    assert not health.exists() or "reward_gaming" not in health.read_text()


SLOW = '''import time

from grpo_cli.rewards.builtins.answers import accuracy


def slow(completions, answer, **kw):
    time.sleep(0.4)
    return accuracy(completions, answer=answer, answer_format="first_number")
'''


def test_the_bottleneck_advice_names_the_part_that_dominated(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "  - {function: rewards.py:slow}\n", SLOW, "eval:\n  before_after: false\n\n", 4)
    out = tmp_path / "out"
    result = run_cli("train", recipe, "-o", out, "training.logging_steps=1")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "where the time went: reward was" in text and "a process pool (the reward's `parallel`)" in text
    report = (out / "report.md").read_text()
    assert "**Bottleneck**: reward was" in report
    assert not (out / "health.jsonl").exists()  # advice, not a health event
    quiet = run_cli("train", recipe, "-o", tmp_path / "quiet", "training.logging_steps=1",
                    "health.bottleneck.enabled=false")
    assert "where the time went" not in quiet.output
