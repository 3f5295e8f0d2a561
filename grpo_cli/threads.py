"""How many threads and workers a run uses, chosen from the CPU cores that are actually free.

torch starts one intra-op thread per core. On a machine that other work keeps busy, those threads wait
for each other at every small matmul (OpenMP barriers on an oversubscribed CPU): a 2-core box with a
load average of 4 trained the demo 3-10x slower with two threads than with one. So the default is
"the cores nobody else is using", shared out between the training processes; the reward sandboxes get
the same count. `OMP_NUM_THREADS` (set by the user), `launch.threads` or `--threads` override it, and
`grpo validate` prints what was chosen and why. `grpo validate` judges "busy" by the 1-minute load average (it
must stay instant); `grpo train` samples the cores' busy time for half a second first, because the load average
trails: a minute after other work ended it still reads about 0.9 on an idle 2-core machine, and SmolLM2 then
trained with one thread at 41-44 s a step instead of 27.6 s with two.

The standard library and grpo's errors only: `grpo validate` calls this without importing torch.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from grpo_cli.errors import GrpoError

THREADS_ENV = "OMP_NUM_THREADS"
CHOSEN_ENV = "GRPO_CHOSEN_THREADS"  # set by grpo for processes it starts; not a user's setting
RELAUNCHED_ENV = "GRPO_RELAUNCHED"  # set in workers `grpo train` started under accelerate (launching/relaunch.py)
MAX_THREADS = 4096  # more than any machine's cores; torch.set_num_threads overflows near 2**31
SMALL_MODEL_PARAMS = 20_000_000  # below this, one thread per process: its matmuls are too small to split


@dataclass(frozen=True)
class ThreadPlan:
    """Threads per training process and reward sandboxes, with the reason (one line for the plan)."""

    torch_threads: int
    sandboxes: int
    reason: str

    def describe(self, sandboxes: bool = False) -> str:
        """One line for the plan; `sandboxes` when the recipe runs code in the reward sandbox."""
        t = self.torch_threads
        boxes = (f", {self.sandboxes} reward sandbox{'es' if self.sandboxes != 1 else ''}" if sandboxes else "")
        hint = "" if self.reason == "launch.threads" else "; override with `launch.threads` or `--threads N`"
        return f"{t} torch thread{'s' if t != 1 else ''} per process{boxes} ({self.reason}{hint})"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which containers and `taskset` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float:
    """The 1-minute load average (0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of these CPUs since boot, from /proc/stat; None where there is none."""
    try:
        lines = Path("/proc/stat").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        values = [int(v) for v in rest.split()[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(values)
        busy += sum(values) - values[3] - (values[4] if len(values) > 4 else 0)
    return (busy, total) if total else None


def busy_cores(window: float = 0.5) -> float | None:
    """Cores other processes kept busy over the next `window` seconds (this process's own use left out), or None
    off Linux. Unlike the load average, it says what is busy now."""
    try:
        cpus = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    before, own_before, start = _ticks(cpus), time.process_time(), time.monotonic()
    if before is None:
        return None
    time.sleep(window)
    after, own, elapsed = _ticks(cpus), time.process_time() - own_before, time.monotonic() - start
    if after is None or after[1] <= before[1]:
        return None
    busy = (after[0] - before[0]) / (after[1] - before[1]) * len(cpus)
    return max(0.0, busy - own / max(elapsed, 1e-6))


def free_cores(cores: int | None = None, load: float | None = None, *, own: float = 0.0) -> int:
    """Cores not busy with other work: usable cores minus the load average (less what is our own), at least 1."""
    cores = usable_cores() if cores is None else cores
    load = load_average() if load is None else load
    others = max(0.0, load - own)
    return max(1, min(cores, int(cores - others + 0.5)))


def _env_threads() -> int | None:
    """OMP_NUM_THREADS as a positive number, else None."""
    try:
        n = int(os.environ.get(THREADS_ENV, ""))
    except ValueError:
        return None
    return n if n > 0 else None


def _chosen_by_grpo() -> bool:
    """OMP_NUM_THREADS holds what grpo chose (for this process or the `grpo train` that launched it)."""
    n = _env_threads()
    return n is not None and os.environ.get(CHOSEN_ENV) == str(n)


def _user_setting() -> int | None:
    """OMP_NUM_THREADS as the user set it (not a value grpo chose and wrote there)."""
    return None if _chosen_by_grpo() else _env_threads()


def inherited() -> int | None:
    """The per-process threads a launching `grpo train` chose for this re-launched worker, else None
    (in the process that chose them, e.g. a notebook training twice, the choice is made afresh)."""
    return _env_threads() if _chosen_by_grpo() and os.environ.get(RELAUNCHED_ENV) else None


def choose_threads(processes: int = 1, *, override: int | None = None, model_params: int | None = None,
                   cores: int | None = None, load: float | None = None, busy: float | None = None,
                   sample: bool = False) -> ThreadPlan:
    """The thread plan for `processes` training processes on this machine, now.

    `override` is `launch.threads`/`--threads`; `model_params` (when known) caps a tiny model at one
    thread per process; `busy` (cores others keep busy) replaces the load average, and `sample` measures it
    (`busy_cores`, half a second) when nothing overrides the choice.
    """
    cores = usable_cores() if cores is None else cores
    if override is not None:
        return ThreadPlan(override, max(1, min(cores, override * processes)), "launch.threads")
    chosen = inherited()
    if chosen is not None:
        return ThreadPlan(chosen, max(1, min(cores, chosen * processes)), "chosen by the launching `grpo train`")
    user = _user_setting()
    if user is not None and user > MAX_THREADS:
        raise GrpoError(f"{THREADS_ENV}={user} asks for more threads per process than any machine has cores",
                        where=THREADS_ENV, fix=f"Unset it (grpo then picks from the free cores: {cores} here) or "
                                               f"set at most {MAX_THREADS}.")
    if user is not None:
        return ThreadPlan(user, max(1, min(cores, user * processes)), f"{THREADS_ENV}={user}")
    load = load_average() if load is None else load
    if busy is None and sample:
        busy = busy_cores()
    free = free_cores(cores, load if busy is None else busy)
    per_process = max(1, free // max(1, processes))
    now = f"load average {load:.1f}" if busy is None else f"{busy:.1f} busy now (load average {load:.1f})"
    reason = f"{cores} core{'s' if cores != 1 else ''}, {now}: {free} free"
    if processes > 1:
        reason += f" for {processes} processes"
    if model_params is not None and model_params < SMALL_MODEL_PARAMS and per_process > 1:
        per_process = 1
        reason += f"; a {model_params / 1e6:.1f}M-parameter model gains nothing from more than one"
    return ThreadPlan(per_process, free, reason)


def apply_torch_threads(plan: ThreadPlan) -> None:
    """Set torch's intra-op threads (and OMP_NUM_THREADS for processes started later, marked as grpo's)."""
    import torch

    if torch.get_num_threads() != plan.torch_threads:
        torch.set_num_threads(plan.torch_threads)
    if _user_setting() is None:
        os.environ[THREADS_ENV] = os.environ[CHOSEN_ENV] = str(plan.torch_threads)


def launch_env_threads(plan: ThreadPlan, env: dict[str, str]) -> None:
    """Pass the chosen per-process threads to re-launched workers (unless the user set OMP_NUM_THREADS)."""
    if plan.reason.startswith(THREADS_ENV):
        return
    env[THREADS_ENV] = env[CHOSEN_ENV] = str(plan.torch_threads)


def pool_workers(parallel: int | str) -> int:
    """Processes for a reward's `parallel`: `auto` is the cores other work leaves free (this process waits
    while its pool scores, so its own core counts as free)."""
    return free_cores(own=1.0) if parallel == "auto" else int(parallel)
