"""Held-out accuracy against wall-clock time, one recipe trained several ways side by side in one run.

The shared benchmark of the step-speed and learning-signal work: the plain TRL script of the recipe (what a user
pastes from a guide), `grpo train` with generation as it was (no shared prompt prefill), `grpo train` as it is,
and the faster ways to train the same recipe (vLLM colocate; async, TRL's AsyncGRPOTrainer against a `grpo
vllm-serve` the benchmark starts first; dynamic sampling; calibrated data). Every runner trains under
benchmarks/vs_trl/train_probe.py, which clocks each optimizer step inside `train()`, and saves a checkpoint every
`--save-steps`; afterwards `grpo eval` scores the base model and every checkpoint the same way (the recipe's eval
settings, transformers backend), so the curves differ only in how they trained. Same seed, data and completions
per step everywhere; dynamic sampling generates more per step, which the table shows as completions generated.

Prints, per runner: steps/s, CPU s per step, the step split (generation, forward, backward; grpo's own timing),
the share of zero-std groups in what was trained, completions generated, the accuracy curve as
`step: accuracy @ seconds`, and the time to reach `--target` against the plain TRL script's. With `--record` also writes
the table, with the load, to docs/performance/history/.

    python benchmarks/vs_trl/time_to_accuracy.py                                   # SmolLM2, 40 steps
    python benchmarks/vs_trl/time_to_accuracy.py --recipe recipes/demo.yaml --steps 200 --save-steps 40 --target 0.5
    python benchmarks/vs_trl/time_to_accuracy.py --runners trl grpo dynamic --steps 20 --save-steps 10 \
        --eval-samples 100
    python benchmarks/vs_trl/time_to_accuracy.py --runners grpo vllm-skip --seeds 42 43 44 --target 0.455   # seed means

With several `--seeds` each runner trains once per seed (runners interleaved, so load drifts over all of them
alike); the table has a row per run and then a row per runner with the seed-mean curve, from which its time and
CPU seconds to the target are read: one seed's curve on this recipe spreads by about 0.2.

`--target trl` compares against the plain script's accuracy at its last step; a runner whose expected curve is the
script's own (the same update, only faster) reaches that at the same step about half the time. `--grpo-steps`
lets the grpo runners train on past it, so the table answers "how long to that accuracy" rather than "is it there
by step --steps":

    python benchmarks/vs_trl/time_to_accuracy.py --runners trl vllm-shared --seeds 42 43 44 --target trl \
        --steps 40 --grpo-steps 50 --save-steps 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402
from benchmarks.vs_trl.accuracy_table import (  # noqa: E402
    HEADER,
    Result,
    Runner,
    row,
    seed_mean,
    target_of,
    time_to,
)

PROBE = ROOT / "benchmarks" / "vs_trl" / "train_probe.py"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
SKIP = "sampling.skip_zero_advantage=true"
DYNAMIC = ("sampling.dynamic={max_rounds: 5}", SKIP)
SHARED = "sampling.share_prompt_forward=true"  # one prompt forward per group (the SmolLM2 recipe sets it)


RUNNERS = (
    Runner("trl", "(a) plain TRL script"),
    Runner("grpo-before", "(b) grpo train, generation as before", env=(("GRPO_SHARED_PREFILL", "0"),)),
    Runner("grpo", "(c) grpo train (shared prompt prefill)"),
    Runner("vllm", "(d) grpo train, vLLM colocate", overrides=("launch.vllm.mode=colocate",), vllm=True),
    Runner("skip", "grpo train, zero-advantage completions skip forward/backward (same update)", overrides=(SKIP,)),
    Runner("vllm-skip", "grpo train, vLLM colocate + zero-advantage skip",
           overrides=("launch.vllm.mode=colocate", SKIP, "sampling.share_prompt_forward=false"), vllm=True),
    Runner("vllm-shared", "grpo train, vLLM colocate + zero-advantage skip + one prompt forward per group",
           overrides=("launch.vllm.mode=colocate", SKIP, SHARED), vllm=True),
    Runner("async", "(e) grpo train, async (TRL's AsyncGRPOTrainer, vLLM server)",
           overrides=("launch.vllm.mode=async",), vllm=True, server=True),
    Runner("dynamic", "grpo train, dynamic sampling (max_rounds 5) + skip", overrides=DYNAMIC),
    Runner("calibrated", "grpo train on calibrated prompts (pass rate in (0, 1))", calibrated=True),
    Runner("calibrated-dynamic", "calibrated prompts + dynamic sampling + skip", overrides=DYNAMIC, calibrated=True),
    Runner("vllm-dynamic", "grpo train, vLLM colocate + dynamic sampling (max_rounds 5) + skip",
           overrides=("launch.vllm.mode=colocate", *DYNAMIC), vllm=True),
    Runner("vllm-calibrated", "grpo train, vLLM colocate + skip on calibrated prompts",
           overrides=("launch.vllm.mode=colocate", SKIP), vllm=True, calibrated=True),
)
# The plain TRL script of each recipe that has one, and the arguments that give it the recipe's settings.
PLAIN = {"recipes/smollm2-word-arith.yaml": ("trl_plain_smollm2.py", ("--model", "{model}")),
         "recipes/demo.yaml": ("trl_plain_demo.py", ("--eval-samples", "0", "--num-threads", "0", "--seed", "42"))}


def _python(runner: Runner) -> str | None:
    if not runner.vllm:
        return sys.executable
    return str(VLLM_PYTHON) if VLLM_PYTHON.exists() else None


def _command(runner: Runner, args: argparse.Namespace, out: Path, probe_out: Path, python: str,
             extra: list[str], seed: int | None) -> list[str]:
    head = [python, str(PROBE), str(probe_out)]
    if runner.name == "trl":
        script, plain_args = PLAIN[args.recipe]
        model_dir = _model_dir(args.recipe)
        return [*head, str(ROOT / "benchmarks" / "vs_trl" / script), *(a.format(model=model_dir) for a in plain_args),
                "--max-steps", str(args.steps), "--save-steps", str(args.save_steps), "--output-dir", str(out),
                *(["--seed", str(seed)] if seed is not None else [])]
    # The vLLM environment may lack the package a `package:` model lives in: give it the converted directory.
    model = [f"model.name_or_path={_model_dir(args.recipe)}"] if runner.vllm else []
    if runner.calibrated:
        model.append(f"data.pass_rate.file={args.calibration}")
    # grpo shuffles the rows once before TRL's sampler shuffles them (`data.shuffle`); the plain scripts do not,
    # so without this the runners would train on other prompts than the plain script from the same seed.
    model.append("data.shuffle=false")
    if seed is not None:
        model.append(f"training.seed={seed}")
    return [*head, "-m", "grpo_cli", "train", args.recipe, "-o", str(out), "--force", *model,
            f"training.max_steps={args.grpo_steps or args.steps}", "training.save_strategy=steps",
            f"training.save_steps={args.save_steps}", "training.save_only_model=true", "eval.before_after=false",
            *args.set, *runner.overrides, *extra]


def _model_dir(recipe: str) -> str:
    """The recipe's model as a directory (a GGUF file's converted copy), which plain TRL and vLLM can load."""
    from grpo_cli import load_recipe
    from grpo_cli.models.loading import model_reference

    return model_reference(load_recipe(ROOT / recipe))


def _logs(out: Path) -> list[dict[str, Any]]:
    """grpo's metrics.jsonl, or the log history TRL keeps in the last checkpoint."""
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    states = sorted(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    return list(json.loads(states[-1].read_text()).get("log_history", [])) if states else []


@contextlib.contextmanager
def _server(runner: Runner, args: argparse.Namespace, python: str) -> Iterator[list[str]]:
    """A `grpo vllm-serve` for a runner that trains against one (async), and the overrides that point at it."""
    if not runner.server:
        yield []
        return
    from grpo_cli.launching.vllm_server import stop_server, wait_for_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = [f"launch.vllm.port={port}", "launch.vllm.server_timeout=900"]
    proc = subprocess.Popen([python, "-m", "grpo_cli", "vllm-serve", args.recipe,
                             f"model.name_or_path={_model_dir(args.recipe)}", *args.set, *extra,
                             "launch.vllm.mode=server"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_server(f"http://127.0.0.1:{port}", 900, alive=lambda: proc.poll() is None)
        yield extra
    finally:
        stop_server(proc)


def train(runner: Runner, args: argparse.Namespace, work: Path, seed: int | None = None) -> Result | str:
    """Train once under the probe; the reason instead when this runner cannot run here."""
    python = _python(runner)
    if python is None:
        return "skipped: no .venv-vllm (scripts/install_vllm_cpu.sh)"
    if runner.name == "trl" and args.recipe not in PLAIN:
        return f"skipped: no plain TRL script for {args.recipe}"
    name = runner.name if seed is None else f"{runner.name}-{seed}"
    out, probe_out = work / name, work / f"{name}.probe.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **dict(runner.env)}
    with _server(runner, args, python) as extra:
        started, launched = time.perf_counter(), time.time()
        done = subprocess.run(_command(runner, args, out, probe_out, python, extra, seed), cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0 or not probe_out.exists():
        return f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}"
    probe = json.loads(probe_out.read_text())
    checkpoints = {int(p.name.split("-")[1]): p for p in out.glob("checkpoint-*") if p.is_dir()}
    if not checkpoints:
        return f"failed: {probe['steps']} steps trained, no checkpoint to score"
    print(f"  {name}: {probe['steps']} steps, train() {probe['wall']:.0f} s "
          f"(process {time.perf_counter() - started:.0f} s)", flush=True)
    return Result(runner, probe["wall"], probe["cpu"], probe["steps"], {int(s): w for s, w, _ in probe["clock"]},
                  _logs(out), dict(sorted(checkpoints.items())), seed=seed,
                  startup=probe["started"] - launched, startup_cpu=probe["cpu_before"])


def evaluate(args: argparse.Namespace, models: list[Path | None], out: Path) -> list[float]:
    """Held-out accuracy (pass@1) of each model, in one `grpo eval` process (None: the recipe's base model)."""
    first, rest = models[0], models[1:]
    cmd = [sys.executable, "-m", "grpo_cli", "eval", args.recipe, "-o", str(out), "--force",
           "--backend", "transformers",
           *(["-m", str(first)] if first is not None else []), *(x for m in rest for x in ("--compare", str(m)))]
    if args.eval_samples:
        cmd += ["--samples", str(args.eval_samples)]
    subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    return [float(m["summary"]["pass@1"]) for m in summary["models"]]


def calibrate(args: argparse.Namespace, out: Path, vllm: bool) -> tuple[Path, float]:
    """`grpo calibrate` once for the calibrated runners (`--calibrate-backend`): its per-prompt pass rates and its
    wall time, an engine's start included."""
    head = [str(VLLM_PYTHON)] if vllm else [sys.executable]
    model = [f"model.name_or_path={_model_dir(args.recipe)}", "--backend", "vllm"] if vllm else []
    cmd = [*head, "-m", "grpo_cli", "calibrate", args.recipe, "-o", str(out), "--force", *args.set, *model]
    if args.calibrate_prompts:
        cmd += ["--max-prompts", str(args.calibrate_prompts)]
    started = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    print(f"calibrated in {seconds:.0f} s", flush=True)
    return out / "calibration.jsonl", seconds


def _run_all(args: argparse.Namespace, work: Path, base: float, lines: list[str]) -> None:
    """Every runner once per seed (runners interleaved), a row each as it ends, then the seed-mean rows."""
    baseline: float | None = None
    target: float | None = None
    runs: dict[str, list[Result]] = {}
    seeds = args.seeds or [None]
    for seed in seeds:
        for runner in (r for r in RUNNERS if r.name in args.runners):
            result = train(runner, args, work, seed)
            if isinstance(result, str):
                lines.append(f"| {runner.label} | {result} |" + " |" * 8)
                print(lines[-1], flush=True)
                continue
            accs = evaluate(args, list(result.checkpoints.values()), work / f"eval-{runner.name}-{seed}")
            result.accuracy = dict(zip(result.checkpoints, accs, strict=True))
            if runner.name == "trl" or target is None:
                target = target_of(args, result if runner.name == "trl" else None)
            if runner.name == "trl" and target is not None:
                baseline = time_to(result, target)
            runs.setdefault(runner.name, []).append(result)
            lines.append(row(result, args, base, baseline, target))
            print(lines[-1], flush=True)
    if args.seeds and len(args.seeds) > 1:
        means = {name: seed_mean(results) for name, results in runs.items()}
        target = target_of(args, means.get("trl"))
        baseline = time_to(means["trl"], target) if "trl" in means and target is not None else None
        if args.target == "trl" and target is not None:
            lines.append(f"| target: the plain TRL script's last-checkpoint accuracy, mean of its seeds: {target:.3f} |"
                         + " |" * 8)
        for mean in means.values():
            lines.append(row(mean, args, base, baseline, target, f", mean of {len(runs[mean.runner.name])} seeds"))
            print(lines[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/smollm2-word-arith.yaml")
    parser.add_argument("--runners", nargs="+", default=[r.name for r in RUNNERS], choices=[r.name for r in RUNNERS])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--grpo-steps", type=int, default=0,
                        help="Steps for the grpo runners (0: --steps). Under a constant learning rate their first "
                             "--steps are the same run; the rest let a faster runner pass --target after the plain "
                             "script's last checkpoint, inside the plain script's wall time.")
    parser.add_argument("--eval-samples", type=int, default=0,
                        help="Held-out prompts (0: the recipe's eval.max_samples).")
    parser.add_argument("--target", default="0.40",
                        help="Held-out accuracy whose time is compared, or `trl`: the plain TRL script's accuracy at "
                             "its last checkpoint (per seed: that seed's run; mean rows: the seed mean).")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="Train each runner once per seed and add its seed-mean row (default: the recipe's seed).")
    parser.add_argument("--set", nargs="*", default=[], help="More overrides for every grpo run (KEY=VALUE).")
    parser.add_argument("--calibrate-prompts", type=int, default=0,
                        help="Training prompts `grpo calibrate` samples for the calibrated runners (0: all).")
    parser.add_argument("--calibrate-backend", choices=("transformers", "vllm"), default="transformers",
                        help="How `grpo calibrate` samples for the calibrated runners (vllm: in .venv-vllm).")
    add_record(parser)
    args = parser.parse_args()
    if 0 < args.grpo_steps < args.steps:
        parser.error(f"--grpo-steps {args.grpo_steps} is under --steps {args.steps}: it gives the grpo runners room "
                     "past the plain script's last step, never fewer steps")
    if args.grpo_steps:
        from grpo_cli import load_recipe

        schedule = load_recipe(ROOT / args.recipe, args.set).training.lr_scheduler_type
        if schedule != "constant":
            parser.error(f"--grpo-steps needs training.lr_scheduler_type: constant (the recipe has {schedule}): "
                         "a decaying rate would make the grpo runners' first --steps another run than the script's")
    lines = list(HEADER)
    with tempfile.TemporaryDirectory(prefix="grpo-tta-") as tmp:
        work = Path(tmp)
        args.calibration, args.calibrate_s = None, 0.0
        calibrated = [r for r in RUNNERS if r.name in args.runners and r.calibrated]
        if calibrated:
            vllm = args.calibrate_backend == "vllm" and VLLM_PYTHON.exists()
            args.calibration, args.calibrate_s = calibrate(args, work / "calibration", vllm)
        base = evaluate(args, [None], work / "eval-base")[0]
        print(f"base model: held-out accuracy {base:.3f}", flush=True)
        _run_all(args, work, base, lines)
    table = "\n".join(lines)
    print(table)
    if args.record:
        steps = f"{args.steps} steps" + (f" ({args.grpo_steps} for grpo)" if args.grpo_steps else "")
        record(f"### Time to accuracy: {args.recipe}, {steps}, checkpoints every {args.save_steps}, target "
               f"{args.target} ({stamp()}, {platform.machine()}, {os.cpu_count()} cores, load {load(all_three=True)}; "
               f"`python benchmarks/vs_trl/time_to_accuracy.py {shlex.join(sys.argv[1:])}`)\n\n{table}\n")


if __name__ == "__main__":
    main()
