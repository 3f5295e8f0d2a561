"""Reward throughput: rewards/s for every built-in, serial vs `parallel: N`, and the code sandbox old vs new.

Every built-in scores the same kind of batch TRL hands it (conversational completions plus the
dataset columns). `accuracy` through math-verify is then timed serially and through ParallelReward
with N worker processes. The `code` reward (2 assert tests per completion) is timed on the old path
(a fresh sandboxed interpreter per test, serially: the sandbox as of commit OLD_REV, loaded from git
history) and on the warm fork-server path (one sandboxed process per completion, `parallel: 1` and
the default of one per CPU), next to the machine's floor: a bare fork()+exit, and `python -c pass`.
The machine load is printed and saved with the figures, because a shared machine slows everything.

    python benchmarks/micro/rewards.py [--workers 2] [--rows 64] [--record]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, record, stamp  # noqa: E402

THINK = "<think>\nStep 1: expand.\nStep 2: simplify.\nStep 3: check.\n</think>\n"


def _conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def numeric_batch(n: int, start: int = 0) -> dict[str, Any]:
    """GSM8K-style numeric answers, every other one right."""
    ids = range(start, start + n)
    completions = [_conv(f"{THINK}<answer>\n{i * 7 + (i % 2)}\n</answer>") for i in ids]
    return {"completions": completions, "answer": [str(i * 7) for i in ids]}


def symbolic_batch(n: int, start: int = 0) -> dict[str, Any]:
    """Symbolic answers that need math-verify: (x+i)^2 against its expansion, new expressions per `start`."""
    ids = range(start, start + n)
    completions = [_conv(f"{THINK}<answer>\n(x+{i})^2\n</answer>") for i in ids]
    return {"completions": completions, "answer": [f"x^2+{2 * i}x+{i * i}" for i in ids]}


def code_batch(n: int, start: int = 0) -> dict[str, Any]:
    """A correct solution against two assert tests, run in the sandbox."""
    solution = "```python\ndef add(a, b):\n    return a + b\n```"
    ids = range(start, start + n)
    completions = [_conv(f"{THINK}<answer>\n{solution}\n</answer>") for _ in ids]
    tests = [["assert add(2, 3) == 5", f"assert add({i}, 1) == {i + 1}"] for i in ids]
    return {"completions": completions, "tests": tests}


BATCHES: dict[str, Callable[..., dict[str, Any]]] = {"code": code_batch}


def call_kwargs(batch: dict[str, Any]) -> dict[str, Any]:
    n = len(batch["completions"])
    ids = [[0] * (len(c[0]["content"]) // 4) for c in batch["completions"]]
    return {"prompts": [[{"role": "user", "content": f"q{i}"}] for i in range(n)], "completion_ids": ids,
            "trainer_state": None, **batch}


def timed(func: Callable[..., Any], calls: list[dict[str, Any]]) -> float:
    """Fastest of the calls (the one the rest of the machine disturbed least, as timeit does)."""
    times = []
    for kwargs in calls:
        start = time.perf_counter()
        func(**kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


def builtin_throughput(rows: int) -> list[tuple[str, int, float]]:
    from grpo_cli.rewards.builtins import BUILTINS

    out = []
    for name, func in BUILTINS.items():
        n = rows
        make = BATCHES.get(name, numeric_batch)
        func(**call_kwargs(make(n, -n)))  # warm imports (and, for `code`, start the sandbox servers)
        seconds = timed(func, [call_kwargs(make(n, k * n)) for k in range(3)])
        out.append((name, n, n / seconds))
    return out


def parallel_speedup(name: str, make: Callable[..., dict[str, Any]], n: int, workers: int) -> tuple[float, float]:
    """Serial and pooled seconds for one call of n rows, fresh rows every call (no cache helps either side)."""
    from grpo_cli.recipe.schema import RewardEntry
    from grpo_cli.rewards import load_reward
    from grpo_cli.rewards.parallel import ParallelReward

    entry = RewardEntry(name=name, parallel=workers)
    calls = [call_kwargs(make(n, k * n)) for k in range(3)]
    warm = call_kwargs(make(n, -n))
    serial_func = load_reward(entry, ROOT)
    serial_func(**warm)  # the same warm-up as the pool gets
    serial = timed(serial_func, calls)
    pool = ParallelReward(entry, ROOT, workers)
    try:
        pool(**warm)  # start the workers and let each import what the reward needs (sympy, ...)
        pooled = timed(pool, calls)
    finally:
        pool.close()
    return serial, pooled


OLD_REV = "e5b86785abfa7144d5b1894533b8ce9969958016"  # the last commit with the per-test cold sandbox


def _old_sandbox() -> Any:
    """The sandbox module as it was at OLD_REV (one self-contained stdlib file), or None without git history."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    try:
        source = subprocess.run(["git", "show", f"{OLD_REV}:grpo_cli/rewards/sandbox.py"], cwd=ROOT,
                                capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(tempfile.mkdtemp(prefix="grpo-old-sandbox-")) / "sandbox.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("grpo_old_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the file runs
    spec.loader.exec_module(module)
    return module


def old_code_reward(old: Any, completions: list[Any], tests: list[list[str]]) -> list[float]:
    """The `code` reward's loop before the warm sandbox: every test a fresh interpreter, serially."""
    import secrets

    from grpo_cli.rewards.builtins.answers import completion_text
    from grpo_cli.rewards.builtins.code import extract_code

    out = []
    for completion, cell in zip(completions, tests, strict=True):
        program = extract_code(completion_text(completion)) or ""
        passed = 0
        for test in cell:
            sentinel = f"grpo-tests-passed-{secrets.token_hex(8)}"
            result = old.run_python(f"{program}\n\n{test}\n\nprint({sentinel!r})\n", timeout=5.0, memory_mb=512)
            passed += result.ok and result.stdout.rstrip().endswith(sentinel)
        out.append(passed / len(cell))
    return out


def _time(func: Callable[[], Any]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _cpu_seconds() -> float:
    """CPU time of this process, its reaped children, and the live sandbox servers with their reaped children."""
    import resource

    from grpo_cli.rewards.sandbox_client import shared_pool

    total = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                for f in ("ru_utime", "ru_stime"))
    for server in shared_pool().servers:
        try:
            fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def _measure(func: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one call."""
    cpu = _cpu_seconds()
    wall = _time(func)
    return wall, _cpu_seconds() - cpu


def code_paths(rows: int, old_rows: int) -> list[tuple[str, int, float, float]]:
    """(path, completions per call, seconds of the fastest call, CPU ms per completion) for the code reward."""
    from grpo_cli.rewards.builtins import BUILTINS
    from grpo_cli.rewards.sandbox_client import default_workers

    code = BUILTINS["code"]
    out: list[tuple[str, int, float, float]] = []
    old = _old_sandbox()
    if old is not None:
        batches = [code_batch(old_rows, k * old_rows) for k in range(2)]
        warm = code_batch(2, -2)
        assert old_code_reward(old, warm["completions"], warm["tests"]) == [1.0, 1.0]
        runs = [_measure(lambda b=b: old_code_reward(old, b["completions"], b["tests"])) for b in batches]
        out.append((f"old: fresh interpreter per test, serial ({OLD_REV[:7]})", old_rows, min(w for w, _ in runs),
                    1000 * sum(c for _, c in runs) / (old_rows * len(runs))))
    for workers in (1, default_workers()):
        assert code(**call_kwargs(code_batch(rows, -rows)), parallel=workers) == [1.0] * rows  # servers up
        calls = [call_kwargs(code_batch(rows, k * rows)) for k in range(3)]
        runs = [_measure(lambda c=c, w=workers: code(**c, parallel=w)) for c in calls]
        label = f"{workers} (default: one per CPU)" if workers == default_workers() else str(workers)
        out.append((f"new: warm server, one process per completion, parallel: {label}", rows,
                    min(w for w, _ in runs), 1000 * sum(c for _, c in runs) / (rows * len(runs))))
    return out


def floor_rates() -> list[tuple[str, float]]:
    """The machine's limit: processes per second for a bare fork()+exit, and for `python -c pass`."""
    import subprocess
    import sys

    def forks(n: int) -> None:
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

    def pythons(n: int, *flags: str) -> None:
        for _ in range(n):
            subprocess.run([sys.executable, *flags, "-c", "pass"], check=True)

    return [("bare fork() + exit, from this Python process", 500 / _time(lambda: forks(500))),
            ("`python -c pass`", 20 / _time(lambda: pythons(20))),
            ("`python -I -S -c pass`", 20 / _time(lambda: pythons(20, "-I", "-S")))]


def code_table(code_rows: list[tuple[str, int, float, float]], floors: list[tuple[str, float]]) -> list[str]:
    old = [k / sec for label, k, sec, _ in code_rows if label.startswith("old")]
    cores = os.cpu_count() or 1
    lines = ["| `code` path (2 assert tests per completion) | completions per call | completions/s | test-runs/s "
             f"| vs old | CPU per completion (ms) | CPU-bound limit on {cores} cores (completions/s) |",
             "|---|---|---|---|---|---|---|"]
    for label, k, sec, cpu_ms in code_rows:
        versus = f"{(k / sec) / old[0]:.1f}x" if old else ""
        lines.append(f"| {label} | {k} | {k / sec:,.0f} | {2 * k / sec:,.0f} | {versus} | {cpu_ms:.1f} | "
                     f"{cores * 1000 / cpu_ms:,.0f} |")
    lines += [f"| floor: {label} | | {rate:,.0f} processes/s | | | | |" for label, rate in floors]
    return lines


def _spin(_: int) -> float:
    start = time.perf_counter()
    sum(i * i for i in range(2_000_000))
    return time.perf_counter() - start


def machine_parallelism(workers: int) -> float:
    """How much faster `workers` plain CPU-bound processes finish than one doing their work: what the
    machine offers right now (other users' load included), the ceiling for any pool's speed-up."""
    import multiprocessing

    start = time.perf_counter()
    for i in range(workers * 2):
        _spin(i)
    serial = time.perf_counter() - start
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_spin, range(workers))
        start = time.perf_counter()
        pool.map(_spin, range(workers * 2), chunksize=2)
        parallel = time.perf_counter() - start
    return serial / parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=64, help="Completions per call.")
    add_record(parser)
    args = parser.parse_args()

    load_before = os.getloadavg()
    throughput = builtin_throughput(args.rows)
    ceiling_before = machine_parallelism(args.workers)
    code_rows = code_paths(args.rows, max(8, args.rows // 4))
    floors = floor_rates()
    slow = {"accuracy (math-verify)": ("accuracy", symbolic_batch, args.rows)}
    speedups = []
    for label, (name, make, n) in slow.items():
        serial, pooled = parallel_speedup(name, make, n, args.workers)
        speedups.append((label, n, serial, pooled))
    ceiling = (ceiling_before, machine_parallelism(args.workers))
    load_after = os.getloadavg()

    lines = ["| built-in | completions per call | rewards/s |", "|---|---|---|"]
    lines += [f"| `{n}` | {k} | {r:,.0f} |" for n, k, r in throughput]
    lines += ["", f"| slow reward | completions per call | serial (s) | parallel: {args.workers} (s) | speed-up |",
              "|---|---|---|---|---|"]
    lines += [f"| {n} | {k} | {s:.2f} | {p:.2f} | {s / p:.2f}x |" for n, k, s, p in speedups]
    lines += [f"| (ceiling: {args.workers} plain CPU-bound processes, before / after) | | | | "
              f"{ceiling[0]:.2f}x / {ceiling[1]:.2f}x |"]
    lines += [""] + code_table(code_rows, floors)
    load = (f"load average (1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
            f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after, on {os.cpu_count()} cores")
    table = "\n".join(lines)
    print(table)
    print(f"\n{load}")
    if args.record:
        header = (f"### Rewards ({stamp()}, {platform.machine()}, {os.cpu_count()} cores, "
                  f"Python {platform.python_version()}, `python benchmarks/micro/rewards.py --workers {args.workers} "
                  f"--rows {args.rows}`)\n\n")
        note = (f"\n\n{load[0].upper()}{load[1:]}. Serial and pooled times are the fastest of 3 calls each "
                "after a warm-up call (the pool's start-up is not counted: in training it starts once). The `code` "
                "paths are the fastest of 2 (old) or 3 (new) calls on fresh rows after a warm-up call; their CPU per "
                "completion (all processes involved, averaged over those calls) hardly depends on the load, and the "
                "last column turns it into what the cores could do if nothing else ran. The floor rows are how many "
                "bare processes per second the machine starts, the limit a process-per-completion design works "
                "against. The ceiling "
                "row is what the machine offered at the time: two plain processes spinning in pure Python, against "
                "one doing both shares; a busy machine lowers it, and no pool can beat it.\n")
        record(header + table + note)


if __name__ == "__main__":
    main()
