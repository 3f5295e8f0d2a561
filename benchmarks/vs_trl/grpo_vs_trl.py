"""What grpo costs over TRL, as two ratios printed by one run, so a regression shows the day it is made.

1. Startup: `grpo validate recipes/gsm8k.yaml` against `trl grpo --help`, in interleaved pairs (validate,
   trl, validate, trl, ...), median of each. Targets: validate's median at most 0.2 s on a quiet machine,
   and the ratio at most 0.054.
2. Per step: `grpo train` against the hand-written TRL script (benchmarks/vs_trl/wrapper_overhead.py), in
   interleaved pairs, one torch thread: steps/s and CPU ms per step. Target: at most 3 % overhead.

Both report wall time and CPU time (user + system of the child): on a shared machine the CPU figures are
the steadier ones, since waiting for a core does not count. grpo's modules are byte-compiled first, as a
`pip install` leaves them (where PYTHONDONTWRITEBYTECODE is set, every run would compile them from source).
Prints one table with the load average (`--record`: also to docs/performance/history/).

    python benchmarks/vs_trl/grpo_vs_trl.py [--pairs 7] [--repeats 3] [--max-steps 150] [--record]
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402
from benchmarks.vs_trl import wrapper_overhead  # noqa: E402


def _exe(name: str, module: str) -> list[str]:
    """The venv's console script when there is one, else `python -m`."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    return [found] if found else [sys.executable, "-m", module]


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `cmd` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup(pairs: int) -> dict[str, list[tuple[float, float]]]:
    """Interleaved runs of `grpo validate recipes/gsm8k.yaml` and `trl grpo --help`."""
    compileall.compile_dir(str(ROOT / "grpo_cli"), quiet=1)
    commands = {"validate": [*_exe("grpo", "grpo_cli"), "validate", "recipes/gsm8k.yaml"],
                "trl": [*_exe("trl", "trl.cli"), "grpo", "--help"]}
    for cmd in commands.values():
        timed(cmd)  # warm: the TRL-fields cache, the page cache
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for i in range(pairs):
        for name, cmd in commands.items():
            runs[name].append(timed(cmd))
        v, t = runs["validate"][-1], runs["trl"][-1]
        print(f"pair {i + 1}: validate {v[0]:.3f} s ({v[1]:.3f} CPU), trl grpo --help {t[0]:.3f} s ({t[1]:.3f} CPU)",
              flush=True)
    return runs


def _median(runs: list[tuple[float, float]], which: int) -> float:
    return statistics.median(r[which] for r in runs)


def startup_table(runs: dict[str, list[tuple[float, float]]]) -> list[str]:
    v, t = runs["validate"], runs["trl"]
    return [
        "| startup | median wall (s) | median CPU (s) | all walls (s) |", "|---|---|---|---|",
        f"| `grpo validate recipes/gsm8k.yaml` | {_median(v, 0):.3f} | {_median(v, 1):.3f} | "
        f"{', '.join(f'{r[0]:.3f}' for r in v)} |",
        f"| `trl grpo --help` | {_median(t, 0):.3f} | {_median(t, 1):.3f} | {', '.join(f'{r[0]:.3f}' for r in t)} |",
        "",
        f"Startup ratio validate / `trl grpo --help`: {_median(v, 0) / _median(t, 0):.3f} wall, "
        f"{_median(v, 1) / _median(t, 1):.3f} CPU (target: at most 0.054; validate at most 0.2 s on a quiet "
        "machine).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7, help="Interleaved startup pairs.")
    wrapper_overhead.add_arguments(parser, repeats=3, max_steps=150)
    add_record(parser)
    args = parser.parse_args()
    load_before = load()
    runs = startup(args.pairs)
    with tempfile.TemporaryDirectory() as tmp:
        plain, wrapped = wrapper_overhead.compare(args, Path(tmp))
    overhead = wrapper_overhead.table(plain, wrapped, target=1.0 if args.model else 3.0)
    text = "\n".join([*startup_table(runs), "", overhead])
    print(text)
    if args.record:
        header = (f"### grpo vs TRL: startup and per-step ratios ({stamp()}, "
                  f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load "
                  f"{load_before} before / {load()} after; {args.pairs} startup pairs; "
                  f"{args.repeats} training pairs of {args.max_steps} steps, {args.prompts_per_step} prompts x "
                  f"{args.num_generations} generations, one torch thread; "
                  "`python benchmarks/vs_trl/grpo_vs_trl.py`)\n\n")
        record(header + text + "\n")


if __name__ == "__main__":
    main()
