"""A user's reward that breaks TRL's contract during `grpo train` or `check-rewards`: the wrong number or type of
values, None for everything, never returning, raising on one row; named with its recipe key, never a traceback
or a hang."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.conftest import ONE_STEP, assert_paragraph, run_cli

REWARDS = '''
import time


def too_few(completions, **kwargs):
    return [1.0] * (len(completions) - 1)


def words(completions, **kwargs):
    return ["good" for _ in completions]


def scalar(completions, **kwargs):
    return 1.0


def nothing(completions, **kwargs):
    return [None for _ in completions]


def sleeps(completions, **kwargs):
    time.sleep(10**6)
    return [0.0 for _ in completions]


async def sleeps_async(completions, **kwargs):
    import asyncio

    await asyncio.sleep(10**6)
    return [0.0 for _ in completions]
'''


@pytest.fixture
def rewards_dir(demo_copy: Path) -> Path:
    (demo_copy.parent / "rw.py").write_text(REWARDS, encoding="utf-8")
    return demo_copy.parent


def _reported(result, *needles: str) -> str:
    """check-rewards' verdict on a reward that failed: exit 1, no traceback, every needle in the output."""
    assert result.exit_code == 1, result
    assert "Traceback" not in result.output, result
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"
    return result.output


@pytest.mark.slow
@pytest.mark.parametrize("func,what", [("too_few", "7 values for 8 completions"), ("words", "'good'"),
                                       ("scalar", "float, not a list")])
def test_train_names_a_reward_with_a_bad_return_value(rewards_dir: Path, func: str, what: str) -> None:
    out = assert_paragraph(run_cli("train", rewards_dir / "demo.yaml", *ONE_STEP,
                                   f"rewards=[{{function: rw.py:{func}}}]", "-o", rewards_dir / "run"),
                           "rewards[0]", f"reward {func!r}", what, "at step 0", "first prompt", "check-rewards")
    assert "ValueError" not in out and "TypeError" not in out


@pytest.mark.slow
def test_train_stops_a_reward_that_never_returns(rewards_dir: Path) -> None:
    start = time.monotonic()
    assert_paragraph(run_cli("train", rewards_dir / "demo.yaml", *ONE_STEP,
                             "rewards=[{function: rw.py:sleeps, timeout: 2}]", "-o", rewards_dir / "run"),
                     "rewards[0]", "'sleeps'", "2 s", "timeout")
    assert time.monotonic() - start < 300  # a hang guard, not a speed target


@pytest.mark.parametrize("entry", ["{function: rw.py:sleeps, timeout: 2}",
                                   "{function: rw.py:sleeps, timeout: 2, parallel: 2}",
                                   "{function: rw.py:sleeps_async, timeout: 2}"],
                         ids=["serial", "parallel", "async"])
def test_check_rewards_reports_a_reward_that_never_returns(rewards_dir: Path, entry: str) -> None:
    out = _reported(run_cli("check-rewards", rewards_dir / "demo.yaml", "-n", "2",
                             f"rewards=[{{name: accuracy, params: {{answer_format: first_number}}}}, {entry}]"),
                    "timeout", "sleeps", "2 s")
    assert "all 2 rewards pass" not in out


@pytest.mark.parametrize("entry", ["{function: rw.py:sleeps, timeout: 3}",
                                   "{function: rw.py:sleeps_async, timeout: 3}"], ids=["serial", "async"])
def test_a_slow_reward_says_it_is_still_running(rewards_dir: Path, entry: str, monkeypatch) -> None:
    from grpo_cli.rewards import calling

    monkeypatch.setattr(calling, "STILL_RUNNING_AFTER_S", 1.0)  # 10 s by default
    out = _reported(run_cli("check-rewards", rewards_dir / "demo.yaml", "-n", "1", f"rewards=[{entry}]"))
    assert "is still running after 1 s; it is stopped at 3 s (its `timeout`)" in out, out
    assert "'sleeps" in out.split("is still running")[0].splitlines()[-1]  # the line names the reward


def test_check_rewards_names_the_file_line_of_the_row_a_reward_fails_on(demo_copy: Path) -> None:
    lines = (demo_copy.parent / "data" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    target = json.loads(lines[3])["question"]
    assert sum(json.loads(x)["question"] == target for x in lines) == 1
    (demo_copy.parent / "picky.py").write_text(
        f"def picky(completions, question, **kwargs):\n"
        f"    if {target!r} in question:\n        raise ValueError('cannot score it')\n"
        f"    return [1.0 for _ in completions]\n", encoding="utf-8")
    out = _reported(run_cli("check-rewards", demo_copy, "-n", str(len(lines)), "rewards=[{function: picky.py:picky}]"),
                    "picky", "train.jsonl line 4)")
    shuffled = re.search(r"on row (\d+) \(train\.jsonl line 4\)", " ".join(out.split()))
    assert shuffled, out  # the index (what --completions files use) and the file line, side by side


def test_check_rewards_fails_a_reward_that_returns_none_for_everything(rewards_dir: Path) -> None:
    out = _reported(run_cli("check-rewards", rewards_dir / "demo.yaml", "-n", "2",
                             "rewards=[{function: rw.py:nothing}]"), "nothing", "None for every completion")
    assert "rewards pass" not in out


def test_a_reward_that_swallows_exceptions_is_still_stopped() -> None:
    """The limit raises what `except Exception` cannot catch, so a retrying reward cannot outlive it."""
    from grpo_cli.errors import RewardTimeoutError
    from grpo_cli.rewards.calling import run_with_timeout

    def stubborn() -> list[float]:
        while True:
            try:
                time.sleep(10)
            except Exception:
                continue

    start = time.monotonic()
    with pytest.raises(RewardTimeoutError, match="'stubborn' did not return within its timeout of 1 s"):
        run_with_timeout(stubborn, 1.0, "stubborn")
    assert time.monotonic() - start < 30  # a hang guard
    assert run_with_timeout(lambda: [1.0], 1.0, "quick") == [1.0]  # and the next call is not disturbed
    time.sleep(1.5)  # nor interrupted later by a stray signal from the finished call


def test_a_reward_called_outside_the_main_thread_is_stopped_too() -> None:
    import threading

    from grpo_cli.errors import RewardTimeoutError
    from grpo_cli.rewards.calling import run_with_timeout

    caught: list[BaseException] = []

    def in_thread() -> None:
        try:
            run_with_timeout(lambda: time.sleep(30), 1.0, "sleepy")
        except RewardTimeoutError as exc:
            caught.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(20)
    assert caught and "sleepy" in str(caught[0])
