"""Bad rewards, data and models met by `grpo train` and `check-rewards`: a named paragraph, never a traceback or hang.

Found by the reliability sweep of issue 11; docs/reliability.md lists the promise each test holds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

# One quick step: 2 prompts x 4 generations, no before/after evaluation.
FAST = ["training.max_steps=1", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]

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


def _paragraph(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, result
    assert "Traceback" not in result.output, result
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"
    return result.output


# ------------------------------------------------------------------ rewards that break TRL's contract in training


@pytest.mark.slow
@pytest.mark.parametrize("func,what", [("too_few", "7 values for 8 completions"), ("words", "'good'"),
                                       ("scalar", "float, not a list")])
def test_train_names_a_reward_with_a_bad_return_value(rewards_dir: Path, func: str, what: str) -> None:
    out = _paragraph(run_cli("train", rewards_dir / "demo.yaml", *FAST, f"rewards=[{{function: rw.py:{func}}}]",
                             "-o", rewards_dir / "run"), 2,
                     "rewards[0]", f"reward {func!r}", what, "at step 0", "first prompt", "check-rewards")
    assert "ValueError" not in out and "TypeError" not in out


# ------------------------------------------------------------------ rewards that never return


@pytest.mark.slow
def test_train_stops_a_reward_that_never_returns(rewards_dir: Path) -> None:
    start = time.monotonic()
    _paragraph(run_cli("train", rewards_dir / "demo.yaml", *FAST, "rewards=[{function: rw.py:sleeps, timeout: 2}]",
                       "-o", rewards_dir / "run"), 2, "rewards[0]", "'sleeps'", "2 s", "timeout")
    assert time.monotonic() - start < 300  # a hang guard, not a speed target


@pytest.mark.parametrize("entry", ["{function: rw.py:sleeps, timeout: 2}",
                                   "{function: rw.py:sleeps, timeout: 2, parallel: 2}",
                                   "{function: rw.py:sleeps_async, timeout: 2}"],
                         ids=["serial", "parallel", "async"])
def test_check_rewards_reports_a_reward_that_never_returns(rewards_dir: Path, entry: str) -> None:
    out = _paragraph(run_cli("check-rewards", rewards_dir / "demo.yaml", "-n", "2",
                             f"rewards=[{{name: accuracy, params: {{answer_format: first_number}}}}, {entry}]"), 1,
                     "timeout", "sleeps", "2 s")
    assert "all 2 rewards pass" not in out


@pytest.mark.parametrize("entry", ["{function: rw.py:sleeps, timeout: 3}",
                                   "{function: rw.py:sleeps_async, timeout: 3}"], ids=["serial", "async"])
def test_a_slow_reward_says_it_is_still_running(rewards_dir: Path, entry: str, monkeypatch) -> None:
    from grpo_cli.rewards import calling

    monkeypatch.setattr(calling, "STILL_RUNNING_AFTER_S", 1.0)  # 10 s by default
    out = _paragraph(run_cli("check-rewards", rewards_dir / "demo.yaml", "-n", "1", f"rewards=[{entry}]"), 1)
    assert "is still running after 1 s; it is stopped at 3 s (its `timeout`)" in out, out
    assert "'sleeps" in out.split("is still running")[0].splitlines()[-1]  # the line names the reward


# ------------------------------------------------------------------ check-rewards contract


def test_check_rewards_names_the_file_line_of_the_row_a_reward_fails_on(demo_copy: Path) -> None:
    lines = (demo_copy.parent / "data" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    target = json.loads(lines[3])["question"]
    assert sum(json.loads(x)["question"] == target for x in lines) == 1
    (demo_copy.parent / "picky.py").write_text(
        f"def picky(completions, question, **kwargs):\n"
        f"    if {target!r} in question:\n        raise ValueError('cannot score it')\n"
        f"    return [1.0 for _ in completions]\n", encoding="utf-8")
    out = _paragraph(run_cli("check-rewards", demo_copy, "-n", str(len(lines)), "rewards=[{function: picky.py:picky}]"),
                     1, "picky", "train.jsonl line 4)")
    shuffled = re.search(r"on row (\d+) \(train\.jsonl line 4\)", " ".join(out.split()))
    assert shuffled, out  # the index (what --completions files use) and the file line, side by side


def test_check_rewards_fails_a_reward_that_returns_none_for_everything(rewards_dir: Path) -> None:
    out = _paragraph(run_cli("check-rewards", rewards_dir / "demo.yaml", "-n", "2",
                             "rewards=[{function: rw.py:nothing}]"), 1, "nothing", "None for every completion")
    assert "rewards pass" not in out


# ------------------------------------------------------------------ data errors name the file and line


def test_check_rewards_names_file_and_line_of_a_broken_jsonl_record(demo_copy: Path) -> None:
    path = demo_copy.parent / "data" / "train.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[36] = lines[36][:12]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = _paragraph(run_cli("check-rewards", demo_copy, "-n", "2"), 2, "train.jsonl", "line 37")
    assert "hub" not in out and "position" not in out


def test_row_errors_name_the_file_line_not_the_shuffled_row(demo_copy: Path) -> None:
    path = demo_copy.parent / "data" / "train.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[5] = '{"question": ["not", "text"], "answer": "1"}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from grpo_cli.data.mapping import prepare_data
    from grpo_cli.errors import GrpoError
    from grpo_cli.recipe import load_recipe

    with pytest.raises(GrpoError) as info:
        prepare_data(load_recipe(demo_copy, ["data.prompt.template=null", "data.prompt.column=question"]))
    message = info.value.render()
    assert "train.jsonl" in message and "line 6" in message, message


# ------------------------------------------------------------------ models


@pytest.mark.slow
def test_corrupt_model_weights(demo_copy: Path) -> None:
    model = demo_copy.parent / "model"
    model.mkdir()
    for f in (ROOT / "grpo_cli" / "assets" / "tiny-arith").iterdir():
        if f.is_file():
            (model / f.name).write_bytes(f.read_bytes())
    (model / "model.safetensors").write_bytes(b"\xff" * 1000)
    _paragraph(run_cli("train", demo_copy, *FAST, "model.name_or_path=./model", "-o", demo_copy.parent / "run"), 2,
               "model.name_or_path", "model.safetensors")


def test_hub_model_on_a_machine_without_network_fails_fast(demo_copy: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                            "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="https://hub.grpo-test.invalid", HF_HOME=str(demo_copy.parent / "hf-home"))
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(demo_copy), *FAST, "model.name_or_path=someone/some-model",
           "-o", str(demo_copy.parent / "run")]
    # A hang guard only (loaded CI machines take minutes to import torch); the no-retry promise is the
    # "Retrying" check below: the libraries print it for each of their ~50 s of retries.
    proc = subprocess.run(cmd, cwd=demo_copy.parent, env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "Retrying" not in out
    assert "someone/some-model" in out and "hub.grpo-test.invalid" in out and "network" in out


@pytest.mark.parametrize("args", [["eval", "--suite", "gsm8k", "--model", "nobody/x"],
                                  ["eval", "--suite", "gsm8k", "nodir"],
                                  ["eval", "DEMO", "--model", "nobody/x", "-n", "1"]],
                         ids=["suite-model", "suite-positional", "recipe-model"])
def test_eval_of_a_hub_model_without_network_fails_fast(demo_copy: Path, args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                            "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="https://hub.grpo-test.invalid", HF_HOME=str(demo_copy.parent / "hf-home"))
    cmd = [sys.executable, "-m", "grpo_cli", *[str(demo_copy) if a == "DEMO" else a for a in args]]
    proc = subprocess.run(cmd, cwd=demo_copy.parent, env=env, capture_output=True, text=True, timeout=40)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "Retrying" not in out
    assert "hub.grpo-test.invalid" in out and "no network" in out


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


def test_hub_probe_tells_a_listening_endpoint_from_a_closed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from grpo_cli import paths

    for name in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert paths.hub_unreachable() is None
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # nothing listens on port 1
    assert "127.0.0.1 cannot be reached" in (paths.hub_unreachable() or "")
