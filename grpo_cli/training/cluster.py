"""Cluster launch files from a recipe: a Slurm batch script and a SkyPilot task.

Both start `grpo train` once per machine with the machine's rank and the main node's address from
the scheduler, so the recipe stays the single source of truth: the process counts, the rendezvous
port, the vLLM server command and the overrides all come from it, and the recipe passes `grpo
validate` (for the cluster's world size) before anything is written.

The Slurm script has the shape TRL's docs and open-r1's `slurm/train.slurm` use: one task per
training node running the launcher with `--machine-rank $SLURM_PROCID` and the first node as main
address, plus, with `--vllm-node`, one extra node running the vLLM server for the others.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema.launch import MULTI_PROCESS_PROFILES


@dataclass
class ClusterPlan:
    """What the launch files need, derived once from the recipe and the command-line choices."""

    recipe_path: Path
    overrides: list[str]
    nodes: int
    processes: int  # training processes over all training nodes
    gpus_per_node: int
    vllm_node: bool = False
    name: str = "grpo"
    server_here: bool = False  # server mode on the single training node
    server_gpus: int = 0  # GPUs of that node the server takes (the last ones)
    extra_sbatch: dict[str, str] = field(default_factory=dict)

    @property
    def per_node(self) -> int:
        return self.processes // self.nodes


def plan_cluster(recipe: Any, recipe_path: Path, overrides: list[str], *, nodes: int, vllm_node: bool,
                 gpus_per_node: int | None) -> ClusterPlan:
    """Check the recipe can run on `nodes` machines and derive the per-node layout."""
    launch = recipe.launch
    where = "launch.profile"
    if launch.profile not in MULTI_PROCESS_PROFILES:
        raise GrpoError(f"profile {launch.profile!r} runs one process; a cluster launch needs a multi-process "
                        "profile", where=where, fix="Add the override `launch.profile=ddp` (or zero2, zero3, "
                                                    "fsdp) after the recipe, e.g. `grpo launch slurm RECIPE "
                                                    "launch.profile=ddp`.")
    if vllm_node and launch.vllm.mode != "server":
        raise GrpoError(f"--vllm-node runs a vLLM server, but launch.vllm.mode is {launch.vllm.mode!r}",
                        where="launch.vllm.mode", fix="Add the override `launch.vllm.mode=server`, or drop "
                                                      "--vllm-node (colocate mode needs no server).")
    server_here = launch.vllm.mode == "server" and not vllm_node
    if server_here and nodes > 1:
        raise GrpoError("a multi-node run in server mode needs the vLLM server on a node of its own",
                        where="launch.vllm.mode", fix="Add --vllm-node (Slurm), or use `launch.vllm.mode=colocate`.")
    if launch.num_processes is not None:
        processes = launch.num_processes
        if processes % nodes:
            raise GrpoError(f"launch.num_processes={processes} cannot be split evenly over {nodes} nodes",
                            where="launch.num_processes", fix=f"Use a multiple of {nodes}.")
        gpus = processes // nodes if gpus_per_node is None else gpus_per_node
    else:
        if gpus_per_node is None:
            raise GrpoError("the recipe does not fix launch.num_processes, so the GPUs per node must be given",
                            where="launch.num_processes",
                            fix="Pass `--gpus-per-node G` (G training processes per node), or set "
                                "`launch.num_processes` in the recipe.")
        if gpus_per_node < 1:
            raise GrpoError("--gpus-per-node 0 needs `launch.num_processes` (processes per CPU node)",
                            where="--gpus-per-node", fix="Set launch.num_processes, e.g. `launch.num_processes=2`.")
        processes, gpus = gpus_per_node * nodes, gpus_per_node
    if server_here and gpus_per_node is None:
        gpus += launch.vllm.server_gpus  # the server shares the one node, on GPUs of its own
    _check_gpus_per_node(processes // nodes, launch.vllm.server_gpus if server_here else 0, gpus_per_node)
    return ClusterPlan(recipe_path, list(overrides), nodes, processes, gpus, vllm_node,
                       name=f"grpo-{recipe_path.stem}", server_here=server_here,
                       server_gpus=launch.vllm.server_gpus if server_here else 0)


def _check_gpus_per_node(per_node: int, server_gpus: int, gpus_per_node: int | None) -> None:
    """A node runs one training process per GPU, plus the server's GPUs when the server shares it."""
    if not gpus_per_node or per_node + server_gpus <= gpus_per_node:
        return
    need = f"{per_node} training process(es)" + (f" + {server_gpus} vLLM server GPU(s)" if server_gpus else "")
    raise GrpoError(f"each node needs {need}, but --gpus-per-node is {gpus_per_node}", where="--gpus-per-node",
                    fix=f"Pass `--gpus-per-node {per_node + server_gpus}`, or lower launch.num_processes "
                        "(or use more --nodes).")


def validate_for_cluster(recipe_path: Path, overrides: list[str], plan: ClusterPlan) -> Any:
    """`grpo validate` for the world the cluster gives; returns that recipe (RecipeError on any problem)."""
    from grpo_cli.recipe.loader import load_recipe
    from grpo_cli.validation import preflight

    layout = [f"launch.num_machines={plan.nodes}", f"launch.num_processes={plan.processes}",
              "launch.main_process_ip=127.0.0.1", *server_node_overrides(plan, "127.0.0.1")]
    world = load_recipe(recipe_path, [*overrides, *layout])
    preflight(world).raise_for_problems()
    return world


def train_flags(plan: ClusterPlan, *, main: str, rank: str) -> list[str]:
    """The `grpo train` flags of one training node: the layout, its rank and the main node's address."""
    return ["--num-machines", str(plan.nodes), "--num-processes", str(plan.processes), "--machine-rank", rank,
            "--main-process-ip", main]


def server_node_overrides(plan: ClusterPlan, host: str) -> list[str]:
    """With a vLLM node: training reaches the server there and leaves its own GPUs to training."""
    return [f"launch.vllm.host={host}", "launch.vllm.server_gpus=0"] if plan.vllm_node else []


def _grpo(verb: str, plan: ClusterPlan, *extra: str, recipe: Path | None = None) -> str:
    return shlex.join(["grpo", verb, str(recipe or plan.recipe_path), *plan.overrides, *extra])


def _expanding_join(args: list[str]) -> str:
    """Join shell words, double-quoting those that name a variable the node's shell must expand."""
    return " ".join(f'"{a}"' if "$" in a else shlex.quote(a) for a in args)


def default_setup() -> str:
    """Activate the environment grpo runs from now (the cluster shares the filesystem)."""
    activate = Path(sys.prefix) / "bin" / "activate"
    return f"source {shlex.quote(str(activate))}" if activate.exists() else ""


def slurm_script(plan: ClusterPlan, *, workdir: Path, setup: str, log_dir: Path) -> str:
    """The sbatch script: N training tasks (one per node) and, with a vLLM node, its server."""
    total = plan.nodes + (1 if plan.vllm_node else 0)
    lines = ["#!/bin/bash",
             f"# GRPO on Slurm: {plan.nodes} training node(s) x {plan.per_node} process(es)"
             + (" + 1 vLLM server node" if plan.vllm_node else "") + ".",
             f"# Written by `grpo launch slurm` from {plan.recipe_path}; regenerate it after editing the recipe.",
             f"#SBATCH --job-name={plan.name}", f"#SBATCH --nodes={total}", f"#SBATCH --ntasks={total}",
             "#SBATCH --ntasks-per-node=1",
             "#SBATCH --signal=TERM@300"]  # 5 minutes before the time limit: every node saves a checkpoint
    if plan.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={plan.gpus_per_node}")
    lines += [f"#SBATCH --{k}={v}" for k, v in plan.extra_sbatch.items()]
    lines += [f'#SBATCH --output="{log_dir}/%x-%j.out"', "", "set -euo pipefail", f"cd {shlex.quote(str(workdir))}"]
    if setup:
        lines.append(setup)
    lines += ['NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
              'export MAIN_NODE="${NODES[0]}"',
              f"TRAIN_TASKS=$((SLURM_NTASKS - {1 if plan.vllm_node else 0}))",
              f'if [ "$TRAIN_TASKS" -ne {plan.nodes} ]; then',
              f'  echo "grpo: this script trains on {plan.nodes} machine(s), the job has $TRAIN_TASKS training '
              'task(s); regenerate it with: grpo launch slurm --nodes $TRAIN_TASKS" >&2',
              "  exit 2", "fi"]
    train_extra = [*train_flags(plan, main="$MAIN_NODE", rank="$SLURM_PROCID"),
                   *server_node_overrides(plan, "$VLLM_NODE")]
    exclude = ""
    if plan.vllm_node:
        server = _grpo("vllm-serve", plan, "launch.vllm.host=0.0.0.0")
        lines += ['export VLLM_NODE="${NODES[-1]}"',
                  f'srun --nodes=1 --ntasks=1 --nodelist="$VLLM_NODE" {server} &',
                  "VLLM_PID=$!"]
        exclude = ' --exclude="$VLLM_NODE"'
    elif plan.server_here:  # on the node this script runs on, on the GPUs training leaves free
        lines += [*_split_gpus(plan), f"env ${{SERVER_GPUS:+CUDA_VISIBLE_DEVICES=$SERVER_GPUS}} "
                  f"{_grpo('vllm-serve', plan)} &"]
    if plan.vllm_node or plan.server_here:  # stop the server however training ends (set -e exits early)
        lines += ["VLLM_PID=$!", "trap 'kill $VLLM_PID 2>/dev/null' EXIT"]
    # Each task expands its own SLURM_PROCID (machine rank); single quotes keep the batch shell from doing it.
    inner = shlex.join(["grpo", "train", str(plan.recipe_path), *plan.overrides])
    inner = "exec " + inner + " " + _expanding_join(train_extra)
    if plan.server_here:  # Slurm sets the step's devices again: hand training the GPUs the server left
        inner = '[ -z "${TRAIN_GPUS:-}" ] || export CUDA_VISIBLE_DEVICES="$TRAIN_GPUS"; ' + inner
    lines.append(f'srun --ntasks="$TRAIN_TASKS"{exclude} --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}')
    return "\n".join(lines) + "\n"


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


def skypilot_task(plan: ClusterPlan, *, accelerator: str, workdir: Path, recipe: Any) -> str:
    """A SkyPilot task YAML: num_nodes machines, the README install as setup, `grpo train` per node as run."""
    try:
        rel = plan.recipe_path.resolve().relative_to(workdir.resolve())
    except ValueError:
        raise GrpoError(f"the recipe {plan.recipe_path} is outside the directory SkyPilot uploads ({workdir})",
                        where="RECIPE", fix="Run `grpo launch skypilot` from the project directory that holds "
                                            "the recipe (SkyPilot syncs it as the workdir).") from None
    extras = [e for e, on in (("deepspeed", recipe.launch.profile in ("zero2", "zero3")),
                              ("vllm", recipe.launch.vllm.mode != "off")) if on]
    setup = f"python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 {_install_spec(workdir, extras)}\n"
    train = ["grpo", "train", str(rel), *plan.overrides]
    run = ['MAIN_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)', "source .venv/bin/activate"]
    if plan.vllm_node:
        raise GrpoError("a dedicated vLLM node is only generated for Slurm", where="--vllm-node",
                        fix="On SkyPilot keep the server on the training node (launch.vllm.server_gpus) or run it "
                            "as a task of its own; drop --vllm-node.")
    if recipe.launch.vllm.mode == "server":
        run += [f"{_grpo('vllm-serve', plan, recipe=rel)} &",  # one node: plan_cluster refuses more
                "VLLM_PID=$!", "trap 'kill $VLLM_PID 2>/dev/null' EXIT"]  # stop the server however training ends
    flags = train_flags(plan, main="$MAIN_IP", rank="$SKYPILOT_NODE_RANK")
    run.append(shlex.join(train) + " " + _expanding_join(flags))
    task = {"name": plan.name, "num_nodes": plan.nodes,
            "resources": {"accelerators": f"{accelerator}:{plan.gpus_per_node}"} if plan.gpus_per_node else {},
            "workdir": ".", "setup": setup, "run": "\n".join(run) + "\n"}
    return _header_and_yaml(plan, rel, task)


def _install_spec(workdir: Path, extras: list[str]) -> str:
    """`-e .` from grpo's own source tree; anywhere else the released package of this version."""
    import tomllib

    from grpo_cli import __version__

    suffix = f"[{','.join(extras)}]" if extras else ""
    try:
        name = tomllib.loads((workdir / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        name = None
    return f'-e ".{suffix}"' if name == "grpo-cli" else shlex.quote(f"grpo-cli{suffix}=={__version__}")


def prepare_cluster(recipe: Any, recipe_path: Path, overrides: list[str], *, nodes: int, vllm_node: bool,
                    gpus_per_node: int | None) -> ClusterPlan:
    """The cluster layout, after the recipe passed `grpo validate` for that layout."""
    plan = plan_cluster(recipe, recipe_path.resolve(), overrides, nodes=nodes, vllm_node=vllm_node,
                        gpus_per_node=gpus_per_node)
    validate_for_cluster(recipe_path, overrides, plan)
    return plan


def write_slurm(plan: ClusterPlan, out: Path | None, *, setup: str | None, sbatch: dict[str, Any],
                force: bool = False) -> Path:
    """Write the sbatch script (executable) to `out` (default `<name>.sbatch` here); returns its path."""
    plan.extra_sbatch = {k: str(v) for k, v in sbatch.items() if v is not None}
    path = (out or Path(f"{plan.name}.sbatch")).resolve()
    text = slurm_script(plan, workdir=Path.cwd(), setup=default_setup() if setup is None else setup,
                        log_dir=path.parent)
    return _write(path, text, mode=0o755, force=force)


def write_skypilot(plan: ClusterPlan, out: Path | None, *, accelerator: str, recipe: Any,
                   force: bool = False) -> Path:
    """Write the SkyPilot task to `out` (default `<name>.sky.yaml` here); returns its path."""
    path = (out or Path(f"{plan.name}.sky.yaml")).resolve()
    return _write(path, skypilot_task(plan, accelerator=accelerator, workdir=Path.cwd(), recipe=recipe), force=force)


def _written_by_grpo(path: Path) -> bool:
    """A launch file this command wrote earlier (its header says so): regenerating it needs no --force."""
    try:
        with path.open("rb") as fh:
            return _HEADER_MARK in fh.read(2048)
    except OSError:
        return False


_HEADER_MARK = b"# Written by `grpo launch "


def _write(path: Path, text: str, mode: int | None = None, force: bool = False) -> Path:
    """Write whole or not at all: an unwritable --out is bad input (exit 2), never a half file or a traceback.

    An existing file is replaced only when grpo wrote it (a regenerated launch file) or with --force.
    """
    if path.is_dir():
        raise GrpoError(f"{path} is a directory", where="--out", fix="Give the path of the file to write.")
    if path.exists() and not force and not _written_by_grpo(path):
        raise GrpoError(f"{path} already exists and was not written by `grpo launch`; refusing to overwrite it",
                        where="--out", fix="Choose another --out, or pass --force to replace it.")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        if mode is not None:
            tmp.chmod(mode)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise GrpoError(f"cannot write {path}: {exc.strerror or exc}", where="--out",
                        fix="Pass -o a path in a directory that exists and you can write to (e.g. `-o job.sbatch` "
                            "here), or create the directory first.") from None
    return path


class _Block(str):
    """A string YAML writes as a literal block (`|`), as SkyPilot's own examples do."""


def _header_and_yaml(plan: ClusterPlan, rel: Path, task: dict[str, Any]) -> str:
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(_Block, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|"))
    task = {**task, "setup": _Block(task["setup"]), "run": _Block(task["run"])}
    header = (f"# GRPO on SkyPilot: {plan.nodes} node(s) x {plan.per_node} process(es).\n"
              f"# Written by `grpo launch skypilot` from {rel}; regenerate it after editing the recipe.\n"
              f"# Start it with: sky launch -c {plan.name} THIS_FILE\n")
    return header + yaml.dump(task, Dumper=_Dumper, sort_keys=False, width=1000)
