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

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError, Problem
from grpo_cli.launching.script_values import check_accelerator, check_plain, job_name
from grpo_cli.paths import write_atomic
from grpo_cli.recipe.loader import load_recipe
from grpo_cli.version import __version__

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


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
    server_node_gpus: int = 0  # with --vllm-node: GPUs of the server's own node (its Slurm het-job component)
    gpus_per_node_given: int | None = None  # --gpus-per-node as given (for the command that regenerates a file)
    extra_sbatch: dict[str, str] = field(default_factory=dict)

    @property
    def per_node(self) -> int:
        return self.processes // self.nodes


def plan_cluster(recipe: Recipe, recipe_path: Path, overrides: list[str], *, nodes: int, vllm_node: bool,
                 gpus_per_node: int | None, verb: str = "slurm", flags: Sequence[str] = ()) -> ClusterPlan:
    """Check the recipe can run on `nodes` machines and derive the per-node layout.

    Every problem is reported at once, each with its fix, and then the whole corrected command
    (`flags`: the command's other options, repeated in it as given).
    """
    launch = recipe.launch
    problems: list[Problem] = []
    add: dict[str, str] = {}  # overrides the corrected command adds
    add_vllm_node = vllm_node
    cpu = launch.spec.cpu_only and gpus_per_node in (None, 0)  # the CPU demo: CPU nodes, no GPUs asked for
    if not launch.spec.multi_process:
        fix = ("On CPU nodes: add `launch.profile=ddp` with `launch.num_processes` (processes in all) and "
               "`--gpus-per-node 0`." if cpu else "Add the override `launch.profile=ddp` (or zero2, zero3, fsdp).")
        problems.append(Problem("launch.profile", f"profile {launch.profile!r} runs one process; a cluster launch "
                                "needs a multi-process profile", fix))
        add["launch.profile"] = "ddp"
        if cpu:
            add.setdefault("launch.num_processes", str(launch.num_processes or 2 * nodes))
            gpus_per_node = 0
    if vllm_node and not launch.vllm.uses_server:
        problems.append(Problem("launch.vllm.mode", f"--vllm-node runs a vLLM server, but launch.vllm.mode is "
                                f"{launch.vllm.mode!r}", "Add the override `launch.vllm.mode=server`, or drop "
                                "--vllm-node (colocate mode needs no server)."))
        add["launch.vllm.mode"] = "server"
    if launch.vllm.uses_server and not vllm_node and nodes > 1:
        if verb == "slurm":
            problems.append(Problem("launch.vllm.mode", "a multi-node run in server mode needs the vLLM server on a "
                                    "node of its own", "Add --vllm-node (or use `launch.vllm.mode=colocate`)."))
            add_vllm_node = True
        else:
            problems.append(Problem("launch.vllm.mode", "a multi-node SkyPilot task cannot run a vLLM server",
                                    "Add the override `launch.vllm.mode=colocate`."))
            add["launch.vllm.mode"] = "colocate"
    if launch.num_processes is not None and launch.num_processes % nodes:
        n = launch.num_processes
        # A recipe laid out for one node with its server beside it (7 + 1 GPU) gives the server's GPUs back to
        # training when the server moves to a node of its own.
        moved = launch.vllm.server_gpus if add_vllm_node and launch.num_machines == 1 else 0
        per_node = n + moved if moved else -(-n // nodes)
        problems.append(Problem("launch.num_processes", f"launch.num_processes={n} cannot be split evenly over "
                                f"{nodes} nodes", f"Add the override `launch.num_processes={per_node * nodes}` "
                                f"({per_node} per node), or any multiple of {nodes}."))
        add["launch.num_processes"] = str(per_node * nodes)
    if launch.num_processes is None and gpus_per_node is None:
        problems.append(Problem("launch.num_processes", "the recipe does not fix launch.num_processes, so the GPUs "
                                "per node must be given", "Pass `--gpus-per-node G` (G training processes per "
                                "node), or set `launch.num_processes`."))
        flags = [*flags, "--gpus-per-node", "G"]  # only the user knows G: the command says where it goes
    if launch.num_processes is None and gpus_per_node is not None and gpus_per_node < 1 and not cpu:
        problems.append(Problem("--gpus-per-node", "--gpus-per-node 0 needs `launch.num_processes` (processes per "
                                "CPU node)", "Set launch.num_processes, e.g. `launch.num_processes=2`."))
    if problems:
        raise ClusterError(problems, _corrected(verb, recipe_path, overrides, add, nodes, add_vllm_node,
                                                gpus_per_node, flags))
    return _layout(recipe, recipe_path, overrides, nodes, vllm_node, gpus_per_node)


class ClusterError(GrpoError):
    """Everything that stops a cluster launch, each with its fix, and the command that fixes them all."""

    def __init__(self, problems: list[Problem], command: str) -> None:
        self.problems = list(problems)
        self.command = command
        Exception.__init__(self, self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            text = self.problems[0].render()
        else:
            text = "\n".join([f"this cluster launch cannot run ({len(self.problems)} problems):",
                              *(f"  - {p.render()}" for p in self.problems)])
        fill = " (put your number for G)" if "--gpus-per-node G" in self.command else ""
        return f"{text}\nCorrected command{fill}: {self.command}"


def _corrected(verb: str, recipe_path: Path, overrides: list[str], add: dict[str, str], nodes: int,
               vllm_node: bool, gpus_per_node: int | None, flags: Sequence[str]) -> str:
    """The command with every fix applied: overrides replaced or added, --vllm-node added."""
    kept = [o for o in overrides if o.partition("=")[0] not in add]
    words = ["grpo", "launch", verb, shown_path(recipe_path), *kept, *(f"{k}={v}" for k, v in add.items()),
             "--nodes", str(nodes)]
    if vllm_node:
        words.append("--vllm-node")
    if gpus_per_node is not None:
        words += ["--gpus-per-node", str(gpus_per_node)]
    return shlex.join([*words, *flags])


def shown_path(path: Path) -> str:
    """The recipe path as the user can type it here: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _layout(recipe: Recipe, recipe_path: Path, overrides: list[str], nodes: int, vllm_node: bool,
            gpus_per_node: int | None) -> ClusterPlan:
    """The per-node layout of a recipe that passed plan_cluster's checks."""
    launch = recipe.launch
    server_here = launch.vllm.uses_server and not vllm_node
    if launch.num_processes is not None:
        processes = launch.num_processes
        gpus = processes // nodes if gpus_per_node is None else gpus_per_node
    else:
        assert gpus_per_node is not None
        processes, gpus = gpus_per_node * nodes, gpus_per_node
    if server_here and gpus_per_node is None:
        gpus += launch.vllm.server_gpus  # the server shares the one node, on GPUs of its own
    _check_gpus_per_node(processes // nodes, launch.vllm.server_gpus if server_here else 0, gpus_per_node, nodes)
    server_node_gpus = max(launch.vllm.server_gpus, launch.vllm.tensor_parallel_size) if vllm_node else 0
    return ClusterPlan(recipe_path, list(overrides), nodes, processes, gpus, vllm_node,
                       name=job_name(recipe_path.stem), server_here=server_here,
                       server_gpus=launch.vllm.server_gpus if server_here else 0,
                       server_node_gpus=server_node_gpus if gpus else 0, gpus_per_node_given=gpus_per_node)


def _check_gpus_per_node(per_node: int, server_gpus: int, gpus_per_node: int | None, nodes: int) -> None:
    """A node runs one training process per GPU, plus the server's GPUs when the server shares it: fewer GPUs
    cannot run, more are reserved and left idle."""
    need_gpus = per_node + server_gpus
    if not gpus_per_node or need_gpus == gpus_per_node:
        return
    need = f"{per_node} training process(es)" + (f" + {server_gpus} vLLM server GPU(s)" if server_gpus else "")
    if need_gpus > gpus_per_node:
        raise GrpoError(f"each node needs {need}, but --gpus-per-node is {gpus_per_node}", where="--gpus-per-node",
                        fix=f"Pass `--gpus-per-node {need_gpus}`, or lower launch.num_processes "
                            "(or use more --nodes).")
    raise GrpoError(f"--gpus-per-node {gpus_per_node} reserves {gpus_per_node - need_gpus} GPU(s) on each node "
                    f"that nothing uses: each node runs {need}", where="--gpus-per-node",
                    fix=f"Pass `--gpus-per-node {need_gpus}`, or train on every GPU with the override "
                        f"`launch.num_processes={(gpus_per_node - server_gpus) * nodes}`.")


def cluster_world(recipe_path: Path, overrides: list[str], plan: ClusterPlan) -> Any:
    """The recipe in the world the cluster gives: what `grpo launch` runs `grpo validate`'s checks on."""
    layout = [f"launch.num_machines={plan.nodes}", f"launch.num_processes={plan.processes}",
              "launch.main_process_ip=127.0.0.1", *server_node_overrides(plan, "127.0.0.1")]
    return load_recipe(recipe_path, [*overrides, *layout])


def train_flags(plan: ClusterPlan, *, main: str, rank: str) -> list[str]:
    """The `grpo train` flags of one training node: the layout, its rank and the main node's address."""
    return ["--num-machines", str(plan.nodes), "--num-processes", str(plan.processes), "--machine-rank", rank,
            "--main-process-ip", main]


def server_node_overrides(plan: ClusterPlan, host: str) -> list[str]:
    """With a vLLM node: training reaches the server there and leaves its own GPUs to training."""
    return [f"launch.vllm.host={host}", "launch.vllm.server_gpus=0"] if plan.vllm_node else []


def grpo_command(verb: str, plan: ClusterPlan, *extra: str, recipe: Path | None = None) -> str:
    return shlex.join(["grpo", verb, str(recipe or plan.recipe_path), *plan.overrides, *extra])


def expanding_join(args: list[str]) -> str:
    """Join shell words, double-quoting those that name a variable the node's shell must expand."""
    return " ".join(f'"{a}"' if "$" in a else shlex.quote(a) for a in args)


def default_setup() -> str:
    """Activate the environment grpo runs from now (the cluster shares the filesystem)."""
    activate = Path(sys.prefix) / "bin" / "activate"
    return f"source {shlex.quote(str(activate))}" if activate.exists() else ""


def skypilot_task(plan: ClusterPlan, *, accelerator: str, workdir: Path, recipe: Recipe) -> str:
    """A SkyPilot task YAML: num_nodes machines, the README install as setup, `grpo train` per node as run."""
    try:
        rel = plan.recipe_path.resolve().relative_to(workdir.resolve())
    except ValueError:
        raise GrpoError(f"the recipe {plan.recipe_path} is outside the directory SkyPilot uploads ({workdir})",
                        where="RECIPE", fix="Run `grpo launch skypilot` from the project directory that holds "
                                            "the recipe (SkyPilot syncs it as the workdir).") from None
    extras = [e for e, on in (("deepspeed", recipe.launch.spec.deepspeed),
                              ("vllm", recipe.launch.vllm.mode != "off")) if on]
    setup = f"python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 {_install_spec(workdir, extras)}\n"
    train = ["grpo", "train", str(rel), *plan.overrides]
    run = ['MAIN_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)', "source .venv/bin/activate"]
    if plan.vllm_node:
        raise GrpoError("a dedicated vLLM node is only generated for Slurm", where="--vllm-node",
                        fix="On SkyPilot keep the server on the training node (launch.vllm.server_gpus) or run it "
                            "as a task of its own; drop --vllm-node.")
    if recipe.launch.vllm.uses_server:
        run += [f"{grpo_command('vllm-serve', plan, recipe=rel)} &",  # one node: plan_cluster refuses more
                "VLLM_PID=$!", "trap 'kill $VLLM_PID 2>/dev/null' EXIT"]  # stop the server however training ends
    flags = train_flags(plan, main="$MAIN_IP", rank="$SKYPILOT_NODE_RANK")
    run.append(shlex.join(train) + " " + expanding_join(flags))
    task = {"name": plan.name, "num_nodes": plan.nodes,
            "resources": {"accelerators": f"{accelerator}:{plan.gpus_per_node}"} if plan.gpus_per_node else {},
            "workdir": ".", "setup": setup, "run": "\n".join(run) + "\n"}
    return _header_and_yaml(plan, rel, task)


def _install_spec(workdir: Path, extras: list[str]) -> str:
    """`-e .` from grpo's own source tree; anywhere else the released package of this version."""
    import tomllib

    suffix = f"[{','.join(extras)}]" if extras else ""
    try:
        name = tomllib.loads((workdir / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        name = None
    return f'-e ".{suffix}"' if name == "grpo-cli" else shlex.quote(f"grpo-cli{suffix}=={__version__}")


def prepare_cluster(recipe: Recipe, recipe_path: Path, overrides: list[str], *, nodes: int, vllm_node: bool,
                    gpus_per_node: int | None, verb: str = "slurm", flags: Sequence[str] = ()) -> ClusterPlan:
    """The cluster layout; the caller checks the recipe in it (`cluster_world`) before writing any file."""
    check_plain(str(recipe_path.resolve()), "RECIPE", "the recipe path")
    check_plain(str(Path.cwd()), "the current directory", "the directory")
    plan = plan_cluster(recipe, recipe_path.resolve(), overrides, nodes=nodes, vllm_node=vllm_node,
                        gpus_per_node=gpus_per_node, verb=verb, flags=flags)
    return plan


def write_skypilot(plan: ClusterPlan, out: Path | None, *, accelerator: str, recipe: Recipe,
                   force: bool = False) -> Path:
    """Write the SkyPilot task to `out` (default `<name>.sky.yaml` here); returns its path."""
    path = (out or Path(f"{plan.name}.sky.yaml")).resolve()
    check_accelerator(accelerator)
    return write_file(path, skypilot_task(plan, accelerator=accelerator, workdir=Path.cwd(), recipe=recipe),
                      force=force, source=plan.recipe_path)


def _written_by_grpo(path: Path) -> bool:
    """A launch file this command wrote earlier (its header says so): regenerating it needs no --force."""
    try:
        with path.open("rb") as fh:
            return _HEADER_MARK in fh.read(2048)
    except OSError:
        return False


_HEADER_MARK = b"# Written by `grpo launch "


def write_file(path: Path, text: str, mode: int | None = None, force: bool = False,
               source: Path | None = None) -> Path:
    """Write whole or not at all: an unwritable --out is bad input (exit 2), never a half file or a traceback.

    An existing file is replaced only when grpo wrote it (a regenerated launch file) or with --force, and never
    when it is the recipe (`source`) the file is made from.
    """
    if source is not None and path.exists() and path.resolve() == source.resolve():
        raise GrpoError(f"{path} is the recipe the launch file is made from", where="--out",
                        fix="Write the launch file elsewhere, e.g. `-o job.sbatch`.")
    if path.is_dir():
        raise GrpoError(f"{path} is a directory", where="--out", fix="Give the path of the file to write.")
    if path.exists() and not force and not _written_by_grpo(path):
        raise GrpoError(f"{path} already exists and was not written by `grpo launch`; refusing to overwrite it",
                        where="--out", fix="Choose another --out, or pass --force to replace it.")

    try:
        write_atomic(path, text, mode=mode)
    except OSError as exc:
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
