"""Re-launch `grpo train` under `accelerate launch` for multi-process profiles.

`grpo train` stays the single entry point: for ddp/zero2/zero3/fsdp it builds an
`accelerate launch ... -m grpo_cli train RECIPE ...` command, runs it as a child process
group and returns its exit code. Everything that can fail cheaply (missing DeepSpeed or
vLLM, a process count that cannot work, batch sizes that do not divide) fails here, once,
before N processes start loading a model.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError, RecipeError
from grpo_cli.planning.topology import (
    check_batches_for_world,
    installed,
    resolve_num_processes,
    visible_gpu_count,
)
from grpo_cli.recipe.profiles import launch_profile
from grpo_cli.runs import manifest_status
from grpo_cli.runs.lock import LOCKED_ENV, RunLock
from grpo_cli.threads import RELAUNCHED_ENV, launch_env_threads

if TYPE_CHECKING:
    from grpo_cli.planning import RunPlan
    from grpo_cli.recipe.schema import Recipe

# Set in the environment of the processes `grpo train` starts, so they never re-launch again.
# `grpo train` flags that travel as launch.* overrides to the re-launched processes.
LAUNCH_FLAGS = {"profile": "--profile", "num_processes": "--num-processes", "num_machines": "--num-machines",
                "machine_rank": "--machine-rank", "main_process_ip": "--main-process-ip", "threads": "--threads"}
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Seconds torchrun waits for workers to save a checkpoint after Ctrl-C before it kills them.
SHUTDOWN_TIMEOUT_S = "600"


def under_launcher() -> bool:
    """True inside a process started by accelerate/torchrun (it must not re-launch again)."""
    return any(k in os.environ for k in ("LOCAL_RANK", "ACCELERATE_LAUNCHED", RELAUNCHED_ENV))


def profile_config_path(profile: str) -> Path:
    """The accelerate config file shipped for a profile (its `accelerate_config` in the profile table).

    Found as package data (`grpo_cli.assets`), the one way that works the same in a checkout and an installed
    wheel; the top-level `accelerate_configs/` link is for users to copy from, never read here. accelerate
    needs a file on disk, so a package imported from a zip archive cannot use the shipped files.
    """
    name = launch_profile(profile).accelerate_config or f"{profile}.yaml"
    shipped = files("grpo_cli.assets") / "accelerate_configs" / name
    if isinstance(shipped, Path) and shipped.is_file():
        return shipped
    raise GrpoError(f"the accelerate config for profile {profile!r} is not installed as a file (looked for "
                    f"{shipped})", where="launch.profile",
                    fix="Copy accelerate_configs/ from the grpo-cli sources and set `launch.accelerate_config` "
                        "to the file for your profile.")


def accelerate_config_path(recipe: Recipe) -> Path:
    """`launch.accelerate_config` (relative to the recipe) if set, else the profile's file."""
    custom = recipe.launch.accelerate_config
    if custom is None:
        return profile_config_path(recipe.launch.profile)
    path = recipe.resolve_path(custom)
    if not path.is_file():
        raise GrpoError(f"file {custom} not found (looked at {path})", where="launch.accelerate_config",
                        fix="Paths are relative to the recipe's directory; start from a copy of "
                            "accelerate_configs/<profile>.yaml.")
    return path


def _uses_deepspeed(recipe: Recipe) -> bool:
    if recipe.launch.accelerate_config is None:
        return recipe.launch.spec.deepspeed
    import yaml

    try:
        data = yaml.safe_load(accelerate_config_path(recipe).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return False  # accelerate itself reports a broken file
    return isinstance(data, dict) and str(data.get("distributed_type", "")).upper() == "DEEPSPEED"


def check_launch_dependencies(recipe: Recipe) -> None:
    """Fail before any model loads when the profile needs DeepSpeed or the recipe needs vLLM."""
    if recipe.launch.spec.multi_process and _uses_deepspeed(recipe) and not installed("deepspeed"):
        raise GrpoError(f"profile {recipe.launch.profile!r} runs DeepSpeed ZeRO, which is not installed",
                        where="launch.profile",
                        fix="Install it with `pip install 'grpo-cli[deepspeed]'` (on a machine without a GPU it "
                            "uses its CPU accelerator), or use `--profile fsdp` for sharded training without "
                            "DeepSpeed.")
    mode = recipe.launch.vllm.mode
    if mode != "off" and not installed("vllm"):
        raise GrpoError(f"vLLM generation (mode {mode!r}) needs vLLM, which is not installed",
                        where="launch.vllm.mode",
                        fix="Install it with `pip install 'grpo-cli[vllm]'` on a CUDA machine, or set "
                            "`launch.vllm.mode=off` to generate with transformers.")


def train_passthrough(output_dir: str | Path | None = None, resume: bool = False, resume_path: str | None = None,
                      force: bool = False) -> list[str]:
    """`grpo train` flags the re-launched processes must see again, in their command-line form.

    A checkpoint given as `--resume PATH` travels as a positional argument after `--resume`, which
    is how `grpo train` reads it (a bare path among the overrides).
    """
    args: list[str] = []
    if output_dir is not None:
        args += ["--output-dir", str(output_dir)]
    if resume or resume_path:
        args.append("--resume")
        if resume_path:
            args.append(str(resume_path))
    if force:
        args.append("--force")
    return args


def accelerate_command(recipe: Recipe, recipe_path: Path | str, overrides: Sequence[str],
                       launch_overrides: Sequence[str], train_args: Sequence[str] = (), *,
                       gpus: int | None = None, processes: int | None = None) -> list[str]:
    """The `accelerate launch` command line that runs this training on all processes of this node.

    `train_args` are the `grpo train` flags to pass through (see `train_passthrough`). When the
    recipe does not fix `launch.num_processes`, the derived count is appended to the launch
    overrides so every process checks TRL's batch arithmetic for the world size it really runs in.
    `processes`: the count the run plan resolved (resolved here when None).
    """
    launch = recipe.launch
    n = resolve_num_processes(recipe, gpus) if processes is None else processes
    child_launch = list(launch_overrides)
    if launch.num_processes is None and f"launch.num_processes={n}" not in child_launch:
        child_launch.append(f"launch.num_processes={n}")
    cmd = [sys.executable, "-m", "grpo_cli.launching.accelerate_launch",  # accelerate launch, quiet on Ctrl-C
           "--config_file", str(accelerate_config_path(recipe)),
           "--num_processes", str(n),
           "--num_machines", str(launch.num_machines),
           "--machine_rank", str(launch.machine_rank)]
    if launch.num_machines > 1:
        cmd += ["--main_process_ip", str(launch.main_process_ip), "--main_process_port", str(launch.main_process_port)]
    return [*cmd, "-m", "grpo_cli", "train", str(recipe_path), *overrides, *child_launch, *train_args]


def launch_env(gpus: int, base: dict[str, str] | None = None, *, deepspeed: bool = False) -> dict[str, str]:
    """The environment of the re-launched processes.

    Without a CUDA GPU, ACCELERATE_USE_CPU makes accelerate pick CPU DDP over gloo (its `--cpu`
    flag would instead run a single process); an FSDP launch is then turned into FSDP2 over gloo in
    each process (training/sharding.py). DeepSpeed is the exception: accelerate drops DeepSpeed when
    told to use the CPU, so it gets DeepSpeed's own CPU accelerator (DS_ACCELERATOR=cpu, gloo)
    instead. The shutdown timeout gives workers time to save a checkpoint after Ctrl-C before
    torchrun kills them.
    """
    env = dict(os.environ if base is None else base)
    env[RELAUNCHED_ENV] = "1"
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", SHUTDOWN_TIMEOUT_S)
    if gpus == 0 and deepspeed:
        env.setdefault("DS_ACCELERATOR", "cpu")
    elif gpus == 0:
        env["ACCELERATE_USE_CPU"] = "true"
    return env


def resume_command(recipe_path: Path | str, overrides: Sequence[str], output_dir: Path | str) -> str:
    """The `grpo train ... --resume` command that continues a run, as the user would type it.

    Launch overrides (which is how --profile/--num-processes reach the re-launched processes) go
    back to their flag form; every other override and the output dir are kept, so the command
    resumes the same run with the same settings.
    """
    import shlex

    plain: list[str] = []
    flags: list[str] = []
    for item in overrides:
        key, _, value = item.partition("=")
        flag = LAUNCH_FLAGS.get(key.removeprefix("launch.")) if key.startswith("launch.") else None
        if flag is None:
            plain.append(item)
        else:
            flags += [flag, value]
    return shlex.join(["grpo", "train", str(recipe_path), *plain, "-o", str(output_dir), *flags, "--resume"])


def _libc_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (no-op elsewhere).

    Safe in a `preexec_fn`: it only calls the prctl function resolved at import time.
    """
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def bind_to_launcher() -> None:
    """In a re-launched worker: die with accelerate, which dies with `grpo train` (see run_forwarding_signals).

    A launcher killed with SIGKILL cannot forward anything; without this its workers would keep
    training to the end with nobody to report to. If the parent is already gone, stop now.
    """
    if os.environ.get(RELAUNCHED_ENV) and _PRCTL is not None:
        parent = os.getppid()
        die_with_parent()
        if parent == 1 or os.getppid() != parent:  # orphaned before the request took effect
            os._exit(137)


def run_forwarding_signals(cmd: Sequence[str], env: dict[str, str]) -> int:
    """Run `cmd` in its own process group, inheriting stdio; return its exit code (130 if interrupted).

    The first SIGINT/SIGTERM is sent to the whole group as SIGTERM: every worker saves a
    checkpoint and stops (forwarding SIGINT would reach each worker twice, once from us and once
    from torchrun, and a second SIGINT means "stop now"). A second SIGINT is forwarded as SIGINT
    (stop now), a third kills the group.
    """
    proc = subprocess.Popen(list(cmd), env=env, process_group=0, preexec_fn=die_with_parent)  # noqa: PLW1509
    received: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        sig = {1: signal.SIGTERM, 2: signal.SIGINT}.get(len(received), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:  # pragma: no cover - wait() retries on EINTR since PEP 475
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received and code != 0:
        return 130
    return code if code >= 0 else 128 - code


def maybe_relaunch(plan: RunPlan, recipe_path: Path, overrides: list[str], launch_overrides: list[str],
                   train_args: Sequence[str] = (), lock_dir: Path | str | None = None) -> int | None:
    """Run this command again under accelerate when the profile needs several processes; return its exit code.

    Returns None (train in this process) for the cpu/single profiles and inside a launched process.
    Missing DeepSpeed/vLLM is reported first, for every profile, before anything heavy happens.
    The workers get the plan's choices (its backend, its process count) as launch overrides and read them;
    `lock_dir`: the run's output directory, locked here while the workers train.
    """
    recipe = plan.recipe
    check_launch_dependencies(recipe)
    if under_launcher():
        bind_to_launcher()
        return None
    if not recipe.launch.spec.multi_process:
        return None
    if plan.processes is None and plan.processes_problem is not None:
        raise RecipeError([plan.processes_problem], source=recipe.source)
    gpus = visible_gpu_count() if plan.gpus is None else plan.gpus
    n = plan.processes or 1
    chosen = [*launch_overrides, *plan.launch_overrides()]
    cmd = accelerate_command(recipe, recipe_path, overrides, chosen, train_args, gpus=gpus, processes=n)
    check_batches_for_world(recipe, n, gpus)
    import shlex

    print(f"launching: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    env = launch_env(gpus, deepspeed=_uses_deepspeed(recipe))
    launch_env_threads(plan.threads, env)  # each worker's share of the free cores
    if lock_dir is None or recipe.launch.machine_rank > 0:
        # Only the main machine writes the run; the others (often on the same shared filesystem) must
        # not contend for its lock.
        return run_forwarding_signals(cmd, env)
    # This process holds the output dir's lock for the whole run; its workers know not to take it.
    with RunLock(Path(lock_dir)).acquire():
        env[LOCKED_ENV] = "1"
        code = run_forwarding_signals(cmd, env)
    # Stopped by a signal sent to another machine of the run: torchrun reports 1, the run says interrupted.
    if code == 1 and manifest_status(Path(lock_dir)) == "interrupted":
        return 130
    return code
