"""The Slurm batch script `grpo launch slurm` writes (the layout comes from `cluster.plan_cluster`).

One task per training node runs `grpo train` with `--machine-rank $SLURM_PROCID` and the first node as
main address. With `--vllm-node` the job is heterogeneous: component 0 holds the training nodes with
their GPUs, component 1 the one vLLM server node with only the GPUs the server uses, so the server
node does not reserve (and leave idle) as many GPUs as a training node.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.launching.cluster import (
    ClusterPlan,
    default_setup,
    expanding_join,
    grpo_command,
    server_node_overrides,
    shown_path,
    train_flags,
    write_file,
)
from grpo_cli.launching.script_values import check_partition, check_plain, check_sbatch_path, check_time, echo_words


def _header(plan: ClusterPlan, log_dir: Path) -> list[str]:
    lines = ["#!/bin/bash",
             f"# GRPO on Slurm: {plan.nodes} training node(s) x {plan.per_node} process(es)"
             + (f" + 1 vLLM server node ({plan.server_node_gpus} GPU(s))" if plan.vllm_node else "") + ".",
             f"# Written by `grpo launch slurm` from {check_plain(str(plan.recipe_path), 'RECIPE', 'the recipe path')}"
             "; regenerate it after editing the recipe.",
             f"#SBATCH --job-name={plan.name}", f"#SBATCH --nodes={plan.nodes}", f"#SBATCH --ntasks={plan.nodes}",
             "#SBATCH --ntasks-per-node=1",
             "#SBATCH --signal=TERM@300"]  # 5 minutes before the time limit: every node saves a checkpoint
    if plan.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={plan.gpus_per_node}")
    lines += [f"#SBATCH --{k}={v}" for k, v in plan.extra_sbatch.items()]
    lines.append(f'#SBATCH --output="{check_sbatch_path(log_dir, "--out")}/%x-%j.out"')
    if plan.vllm_node:  # the server's node: a component of its own, with only the GPUs the server uses
        lines += ["#SBATCH hetjob", "#SBATCH --nodes=1", "#SBATCH --ntasks=1", "#SBATCH --ntasks-per-node=1"]
        if plan.server_node_gpus:
            lines.append(f"#SBATCH --gpus-per-node={plan.server_node_gpus}")
        lines += [f"#SBATCH --{k}={v}" for k, v in plan.extra_sbatch.items()]
    return lines


def regenerate_command(plan: ClusterPlan) -> tuple[str, str]:
    """The `grpo launch slurm` command that writes this script again, split around the number of nodes
    (shell-quoted words: the text before `--nodes N` and after it)."""
    words = ["grpo", "launch", "slurm", shown_path(plan.recipe_path), *plan.overrides]
    flags = ["--vllm-node"] if plan.vllm_node else []
    if plan.gpus_per_node_given is not None:
        flags += ["--gpus-per-node", str(plan.gpus_per_node_given)]
    return shlex.join(words) + " --nodes ", (" " + shlex.join(flags)) if flags else ""


def _task_count_check(plan: ClusterPlan, group: str) -> list[str]:
    """Shell lines: stop with the regenerating command when the job has another number of training tasks. The
    command is single-quoted text (an override holding `$(...)` or a backquote is printed, never run)."""
    before, after = regenerate_command(plan)
    message = echo_words((f"grpo: this script trains on {plan.nodes} machine(s), the job has ", False),
                         ("$TRAIN_TASKS", True), (" training task(s); regenerate it with: " + before, False),
                         ("$TRAIN_TASKS", True), (after, False))
    return [f'TRAIN_TASKS="$SLURM_NTASKS{group}"', f'if [ "$TRAIN_TASKS" -ne {plan.nodes} ]; then',
            f"  echo {message} >&2", "  exit 2", "fi"]


def slurm_script(plan: ClusterPlan, *, workdir: Path, setup: str, log_dir: Path) -> str:
    """The sbatch script: N training tasks (one per node) and, with a vLLM node, its server."""
    lines = [*_header(plan, log_dir), "", "set -euo pipefail", f"cd {shlex.quote(str(workdir))}"]
    if setup:
        lines.append(setup)
    group = "_HET_GROUP_0" if plan.vllm_node else ""
    lines += [f'NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST{group}"))',
              'export MAIN_NODE="${NODES[0]}"', *_task_count_check(plan, group)]
    train_extra = [*train_flags(plan, main="$MAIN_NODE", rank="$SLURM_PROCID"),
                   *server_node_overrides(plan, "$VLLM_NODE")]
    het = ""
    if plan.vllm_node:
        server = grpo_command("vllm-serve", plan, "launch.vllm.host=0.0.0.0")
        lines += ['export VLLM_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_1" | head -n1)"',
                  f"srun --het-group=1 --nodes=1 --ntasks=1 {server} &"]
        het = " --het-group=0"
    elif plan.server_here:  # on the node this script runs on, on the GPUs training leaves free
        lines += [*_split_gpus(plan), f"env ${{SERVER_GPUS:+CUDA_VISIBLE_DEVICES=$SERVER_GPUS}} "
                  f"{grpo_command('vllm-serve', plan)} &"]
    if plan.vllm_node:  # stop the server however training ends (set -e exits early), see _stop_server_step
        lines += ["VLLM_PID=$!", *_stop_server_step(), "trap stop_server EXIT"]
    elif plan.server_here:
        lines += ["VLLM_PID=$!", "trap 'kill $VLLM_PID 2>/dev/null' EXIT"]
    # Each task expands its own SLURM_PROCID (machine rank); single quotes keep the batch shell from doing it.
    inner = shlex.join(["grpo", "train", str(plan.recipe_path), *plan.overrides])
    inner = "exec " + inner + " " + expanding_join(train_extra)
    if plan.server_here:  # Slurm sets the step's devices again: hand training the GPUs the server left
        inner = '[ -z "${TRAIN_GPUS:-}" ] || export CUDA_VISIBLE_DEVICES="$TRAIN_GPUS"; ' + inner
    lines.append(f'srun{het} --ntasks="$TRAIN_TASKS" --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}')
    return "\n".join(lines) + "\n"


def _stop_server_step() -> list[str]:
    """Shell lines: SIGTERM to the server's step (het component 1), up to 60 s to shut down, then kill it.

    Killing its srun instead makes Slurm SIGKILL the server: vLLM then leaves its shared-memory segments
    (about 400 MB for the demo) in the server node's /dev/shm, and the log ends in "task 0: Killed".
    """
    return ["stop_server() {", '  scancel --signal=TERM "$SLURM_JOB_ID+1" 2>/dev/null || true',
            '  for _ in $(seq 60); do kill -0 "$VLLM_PID" 2>/dev/null || return 0; sleep 1; done',
            '  kill "$VLLM_PID" 2>/dev/null || true', "}"]


def _split_gpus(plan: ClusterPlan) -> list[str]:
    """Shell lines: the last server_gpus of the job's CUDA_VISIBLE_DEVICES go to the server, the rest to training."""
    k, need = plan.server_gpus, plan.per_node + plan.server_gpus
    if k < 1:
        return []
    return ['SERVER_GPUS=""', 'TRAIN_GPUS=""', 'if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then',
            '  IFS=, read -ra GPUS <<< "$CUDA_VISIBLE_DEVICES"',
            f'  if [ "${{#GPUS[@]}}" -lt {need} ]; then',
            f'    echo "grpo: training needs {plan.per_node} GPU(s) and the vLLM server {k}, the job has '
            '${#GPUS[@]}: $CUDA_VISIBLE_DEVICES" >&2', "    exit 2", "  fi",
            f'  SERVER_GPUS=$(IFS=,; echo "${{GPUS[*]:${{#GPUS[@]}}-{k}}}")',
            f'  TRAIN_GPUS=$(IFS=,; echo "${{GPUS[*]:0:${{#GPUS[@]}}-{k}}}")', "  export TRAIN_GPUS", "fi"]


def submit_sbatch(script: Path) -> str:
    """Submit with `sbatch --parsable` and return the job id."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise GrpoError("`sbatch` is not on PATH, so the script cannot be submitted from here", where="--submit",
                        fix=f"Run on a Slurm login node, or copy the script there and run `sbatch {script}`.")
    proc = subprocess.run([sbatch, "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise GrpoError(f"sbatch refused the script: {proc.stderr.strip() or proc.stdout.strip()}", where="--submit",
                        fix="Adjust --partition/--time/--gpus-per-node for this cluster and generate it again.")
    return proc.stdout.strip().split(";")[0]


def write_slurm(plan: ClusterPlan, out: Path | None, *, setup: str | None, sbatch: dict[str, Any],
                force: bool = False, run_dir: Path | None = None) -> Path:
    """Write the sbatch script (executable) to `out`, default `RUN_DIR/launch/<name>.sbatch` (the recipe's
    output.dir: the script and the job's logs stay with the run, not in the repository); returns its path."""
    checks = {"partition": check_partition, "time": check_time}
    plan.extra_sbatch = {k: checks.get(k, str)(str(v)) for k, v in sbatch.items() if v is not None}
    path = (out or (run_dir or Path()) / runs.LAUNCH_DIR / f"{plan.name}.sbatch").resolve()
    if out is None:
        with contextlib.suppress(OSError):  # an unwritable place is write_file's one-paragraph error
            path.parent.mkdir(parents=True, exist_ok=True)
    text = slurm_script(plan, workdir=Path.cwd(), setup=default_setup() if setup is None else setup,
                        log_dir=path.parent)
    return write_file(path, text, mode=0o755, force=force, source=plan.recipe_path)
