"""`parallel: N` rewards: a process pool that gives the same scores, in order, as the serial call."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.loader import load_recipe
from grpo_cli.recipe.schema import RewardEntry
from grpo_cli.rewards import build_reward_funcs, load_reward
from grpo_cli.rewards.parallel import ParallelReward

USER = '''
import os


def tagged(completions, answer, *, bonus=0.0, trainer_state=None, log_metric=None, log_extra=None, **kwargs):
    log_metric("worker_pid", float(os.getpid()))
    log_extra("seen", [c[:3] for c in completions])
    step = trainer_state.global_step if trainer_state is not None else -1
    return [None if a is None else float(a in c) + bonus + step for c, a in zip(completions, answer)]


def broken(completions, **kwargs):
    raise ValueError("bad row")
'''


def _kwargs(n: int) -> dict[str, Any]:
    answers = [None if i % 3 == 2 else str(i) for i in range(n)]
    completions = [f"<answer>{i if i % 2 else i + 1}</answer>" for i in range(n)]
    return {"prompts": [f"q{i}" for i in range(n)], "completions": completions,
            "completion_ids": [[1, 2]] * n, "answer": answers}


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "user.py").write_text(USER, encoding="utf-8")
    return tmp_path


def test_pool_matches_serial_in_order_with_none_rows() -> None:
    entry = RewardEntry(name="accuracy", parallel=2)
    kwargs = _kwargs(11)  # uneven chunks: 2 workers x 4 chunks of up to 2 rows
    serial = load_reward(entry, Path("."))(**kwargs)
    pool = ParallelReward(entry, Path("."), 2)
    try:
        assert pool(**kwargs) == serial
        assert None in serial and 1.0 in serial and 0.0 in serial
    finally:
        pool.close()


def test_file_reward_in_workers_keeps_params_state_and_logging(user_dir: Path) -> None:
    entry = RewardEntry(function="user.py:tagged", params={"bonus": 0.5}, parallel=2)
    pool = ParallelReward(entry, user_dir, 2)
    metrics: list[tuple[str, float]] = []
    extras: dict[str, list[Any]] = {}
    try:
        values = pool(**_kwargs(6), trainer_state=SimpleNamespace(global_step=10, log_history=[{"x": 1}]),
                      log_metric=lambda k, v: metrics.append((k, v)),
                      log_extra=lambda k, v: extras.setdefault(k, []).extend(v))
    finally:
        pool.close()
    assert values == [10.5, 11.5, None, 11.5, 10.5, None]
    assert pool.__name__ == "tagged"
    assert [k for k, _ in metrics] == ["worker_pid"] * 6  # one call per chunk (of 1 row), replayed here
    assert extras["seen"] == ["<an"] * 6  # one per row, in row order


def test_worker_exception_reaches_the_caller(user_dir: Path) -> None:
    pool = ParallelReward(RewardEntry(function="user.py:broken", parallel=2), user_dir, 2)
    try:
        with pytest.raises(ValueError, match="bad row"):
            pool(**_kwargs(4))
    finally:
        pool.close()


def test_bad_reference_fails_before_any_worker_starts(user_dir: Path) -> None:
    with pytest.raises(GrpoError, match=r"rewards\[2\].function.*no callable 'tagd'"):
        ParallelReward(RewardEntry(function="user.py:tagd", parallel=2), user_dir, 2, index=2)


def test_build_reward_funcs_pools_only_parallel_code_rewards(minimal_dir: Path) -> None:
    (minimal_dir / "rm").mkdir()
    (minimal_dir / "rm" / "config.json").write_text("{}")
    recipe = minimal_dir / "recipe.yaml"
    recipe.write_text("""
model: {name_or_path: Qwen/Qwen2.5-0.5B-Instruct}
data: {files: data.jsonl, prompt: {column: question}}
rewards:
  - {name: accuracy, parallel: 2}
  - {name: format}
  - {model: ./rm, parallel: 2}
""", encoding="utf-8")
    funcs = build_reward_funcs(load_recipe(recipe))
    assert isinstance(funcs[0], ParallelReward) and funcs[0].__name__ == "accuracy" and funcs[0]._pool is None
    assert not isinstance(funcs[1], ParallelReward) and funcs[1].__name__ == "format"
    assert funcs[2] == str(minimal_dir / "rm")  # TRL batches reward models itself
