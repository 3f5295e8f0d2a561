"""Score slow rewards (math-verify, code execution) in a process pool.

Each worker loads the reward itself from the recipe entry (functions from files are
not picklable by reference), then scores contiguous chunks of the rows. What cannot
cross a process boundary is handled here: `trainer_state` travels as a namespace of its
plain fields (global_step, max_steps, epoch, ...), and calls to TRL's `log_extra` / `log_metric` are recorded in the
worker and replayed in the trainer's process.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError, RewardTimeoutError
from grpo_cli.recipe.schema.rewards import RewardEntry
from grpo_cli.rewards.calling import call_reward, explain_in_training, locate, run_with_timeout, training_problem
from grpo_cli.rewards.loaders import load_reward

_WORKER_REWARD: Any = None
_LOCAL_ONLY = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})


def _init_worker(entry_data: dict[str, Any], base_dir: str) -> None:
    global _WORKER_REWARD
    _WORKER_REWARD = load_reward(RewardEntry.model_validate(entry_data), Path(base_dir))


def _score_chunk(kwargs: dict[str, Any]) -> tuple[list[Any], list[tuple[str, str, Any]]]:
    """Score one chunk; return the values and the log calls the reward made."""
    logged: list[tuple[str, str, Any]] = []
    kwargs = dict(kwargs)
    kwargs["log_extra"] = lambda column, values: logged.append(("extra", column, list(values)))
    kwargs["log_metric"] = lambda name, value: logged.append(("metric", name, value))
    return list(call_reward(_WORKER_REWARD, **kwargs)), logged


def _ready(_: int) -> bool:
    return True


def _portable_state(state: Any) -> Any:
    """TRL's TrainerState as a namespace of its plain fields (global_step, max_steps, epoch, ...).

    Unpickling the real class would import transformers in every worker (seconds each); rewards
    read the counters, not the log history or callback states.
    """
    from types import SimpleNamespace

    if state is None:
        return None
    fields = getattr(state, "__dict__", {})
    return SimpleNamespace(**{k: v for k, v in fields.items() if isinstance(v, int | float | str | bool | None)})


class ParallelReward:
    """A reward that splits each call's rows across `workers` processes.

    It is synchronous to TRL (the pool does the waiting). Each call's rows are cut into a few
    contiguous chunks per worker; rewards that look at the whole batch (`length`) see a chunk.
    The reward is imported once in this process too, so a bad reference fails here with a
    clear error, not as a broken pool.
    """

    CHUNKS_PER_WORKER = 4

    def __init__(self, entry: RewardEntry, base_dir: Path, workers: int, index: int | None = None) -> None:
        load_reward(entry, base_dir, index)  # fail early and clearly on a bad reference
        self.entry = entry
        self.base_dir = base_dir
        self.workers = workers
        self.__name__ = entry.label
        self.where = ""  # set for training, as on BoundReward
        self.entry_where = ""
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")  # never fork a process holding torch threads
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker,
                initargs=(self.entry.model_dump(), str(self.base_dir)),
            )
            list(self._pool.map(_ready, range(self.workers)))  # spawn workers and run their initializers now
        return self._pool

    def __call__(self, **kwargs: Any) -> list[float | None]:
        self._executor()  # started (and its workers ready) outside the time limit: start-up is not the reward's
        try:
            out = run_with_timeout(lambda: self._score(kwargs), self.entry.timeout, self.__name__)
        except BaseException as exc:
            if isinstance(exc, RewardTimeoutError | KeyboardInterrupt):
                self._kill()  # workers still busy with the expired call would hold the next one up
            if isinstance(exc, RewardTimeoutError) and self.where:
                raise explain_in_training(self.__name__, self.where, f"did not return within its timeout of "
                                          f"{exc.seconds:g} s", kwargs, RewardTimeoutError) from None
            if isinstance(exc, Exception) and self.where and not isinstance(exc, GrpoError):
                raise explain_in_training(self.__name__, self.where, f"raised {type(exc).__name__}: {exc}",
                                          kwargs) from exc
            if isinstance(exc, GrpoError) and not isinstance(exc, RewardTimeoutError):
                raise locate(exc, self.where or self.entry_where) from None
            raise
        problem = training_problem(out, len(kwargs["completions"])) if self.where else ""
        if problem:
            raise explain_in_training(self.__name__, self.where, problem, kwargs)
        return out

    def _score(self, kwargs: dict[str, Any]) -> list[float | None]:
        n = len(kwargs["completions"])
        per_row = {k: v for k, v in kwargs.items()
                   if k not in _LOCAL_ONLY and isinstance(v, list | tuple) and len(v) == n}
        shared = {k: v for k, v in kwargs.items() if k not in _LOCAL_ONLY and k not in per_row and not callable(v)}
        if "trainer_state" in kwargs:
            shared["trainer_state"] = _portable_state(kwargs["trainer_state"])
        # A few chunks per worker, so a worker slowed by a hard row (a test that times out) is not the tail.
        size = max(1, -(-n // (self.workers * self.CHUNKS_PER_WORKER)))
        chunks = [{**shared, **{k: v[i:i + size] for k, v in per_row.items()}} for i in range(0, n, size)]
        out: list[float | None] = []
        extras: dict[str, list[Any]] = {}
        for values, logged in self._executor().map(_score_chunk, chunks):
            out.extend(values)
            for kind, name, value in logged:
                if kind == "extra":
                    extras.setdefault(name, []).extend(value)
                elif callable(kwargs.get("log_metric")):
                    kwargs["log_metric"](name, value)
        if callable(kwargs.get("log_extra")):
            for column, values in extras.items():
                kwargs["log_extra"](column, values)
        return out

    def _kill(self) -> None:
        """Stop the workers now, mid-call (shutdown() would wait for a reward that never returns)."""
        if self._pool is not None:
            processes = getattr(self._pool, "_processes", None) or {}  # no public API to kill them before 3.14
            for process in list(processes.values()):
                process.kill()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        """Stop the worker processes (they are restarted on the next call)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __repr__(self) -> str:
        return f"<reward {self.__name__} x{self.workers} processes>"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_pool"] = None
        return state
