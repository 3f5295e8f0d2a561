"""The vLLM generation server for `launch.vllm.mode: server`, built from the same recipe.

`grpo vllm-serve RECIPE` runs `vllm serve` the way TRL 1.16 documents for server mode, with the
model, revision, port and engine settings the trainer will expect, so the two sides cannot drift apart. Training
calls `wait_for_server` before loading the model, so a server that is not up is reported
in seconds with the command to start it, not after minutes of model loading.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.launching.relaunch import visible_gpu_count
from grpo_cli.launching.vllm_receiver import RECEIVER
from grpo_cli.models import model_reference
from grpo_cli.planning.topology import installed
from grpo_cli.planning.vllm_support import cpu_env, vllm_runs_on_cpu

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

# The path TRL 1.16's VLLMClient polls (vLLM's own server answers it; `/health/` redirects there).
HEALTH_PATH = "/health"


def server_base_url(recipe: Recipe) -> str:
    """The URL the trainer will contact: launch.vllm.base_url, else http://host:port."""
    v = recipe.launch.vllm
    return (v.base_url or f"http://{v.host}:{v.port}").rstrip("/")


def _bind_address(recipe: Recipe) -> tuple[str, int]:
    """Where the server listens: the host and port of base_url when given, else launch.vllm.host/port."""
    v = recipe.launch.vllm
    if v.base_url:
        from urllib.parse import urlparse

        parsed = urlparse(v.base_url)
        return parsed.hostname or v.host, parsed.port or (443 if parsed.scheme == "https" else 80)
    return v.host, v.port


def vllm_serve_command(recipe: Recipe) -> list[str]:
    """`vllm serve MODEL ...` as TRL 1.16 documents it for server mode, with this recipe's settings.

    TRL 1.16 deprecated `trl vllm-serve`: it now only runs vLLM's own server with the flags its
    client needs (NCCL weight transfer, processed logprobs, uncapped logprobs) and VLLM_SERVER_DEV_MODE=1
    (see `server_env`). The flags come from TRL's own `build_command`, so they follow the installed TRL.
    gpu_memory_utilization is passed only when the recipe sets it: its schema default (0.3) is meant
    for colocate mode, while a dedicated server should keep TRL's 0.9.
    """
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    v = recipe.launch.vllm
    if not v.uses_server:
        raise GrpoError(f"launch.vllm.mode is {v.mode!r}; a separate vLLM server is only used in server and async mode",
                        where="launch.vllm.mode",
                        fix="Add the override `launch.vllm.mode=server` (and use the same recipe for training).")
    if v.tensor_parallel_size > max(v.server_gpus, 1):
        raise GrpoError(f"tensor_parallel_size {v.tensor_parallel_size} needs {v.tensor_parallel_size} GPUs but "
                        f"launch.vllm.server_gpus is {v.server_gpus}", where="launch.vllm.server_gpus",
                        fix=f"Set `launch.vllm.server_gpus: {v.tensor_parallel_size}` so training leaves them free.")
    m = recipe.model
    host, port = _bind_address(recipe)
    args: dict[str, Any] = {"model": model_reference(recipe), "revision": m.revision, "host": host, "port": port,
                            "tensor_parallel_size": v.tensor_parallel_size, "max_model_len": v.max_model_length,
                            "trust_remote_code": m.trust_remote_code}
    if "gpu_memory_utilization" in v.model_fields_set:
        args["gpu_memory_utilization"] = v.gpu_memory_utilization
    if m.dtype != "auto":
        args["dtype"] = m.dtype
    if vllm_runs_on_cpu(recipe):  # torch.compile at start-up: 147 s vs 39 s eager for the demo (performance.md)
        args["enforce_eager"] = True
    full = build_command(ScriptArguments(**args))  # [python, -m, vllm.entrypoints.cli.main, serve, ...]
    cmd = ["vllm", *full[full.index("serve"):]]
    if vllm_runs_on_cpu(recipe):  # no NCCL: the trainer sends weights to grpo's receiver (training/vllm_cpu.py)
        cmd += ["--worker-extension-cls", RECEIVER]
    return cmd


def server_env(recipe: Recipe | None = None) -> dict[str, str]:
    """The environment TRL 1.16 documents for the server (its weight-sync endpoints need vLLM's dev mode),
    plus what vLLM's CPU build needs when it runs on the CPU."""
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if recipe is not None and vllm_runs_on_cpu(recipe):
        env.update(cpu_env())
    return env


def server_gpu_env(recipe: Recipe, gpus: int | None = None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for the server: the last `server_gpus` GPUs, which training leaves free.

    `grpo train` with N processes uses GPUs 0..N-1, so on an 8-GPU node with server_gpus: 1 the
    server belongs on GPU 7. Nothing is set when the user already chose (CUDA_VISIBLE_DEVICES).
    """
    environ = dict(os.environ) if environ is None else environ
    k = recipe.launch.vllm.server_gpus
    if "CUDA_VISIBLE_DEVICES" in environ or k < 1:
        return {}
    if gpus is None:
        gpus = visible_gpu_count()
    if gpus <= k:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus - k, gpus))}


def check_port_free(recipe: Recipe) -> None:
    """The server's address must be free before vLLM starts: on a busy port vLLM loads the model for about a
    minute and then dies with its own traceback. Bound with SO_REUSEADDR, as vLLM's server binds, so a port
    left in TIME_WAIT by a stopped server still counts as free."""
    import errno
    import socket

    host, port = _bind_address(recipe)
    where = "launch.vllm.base_url" if recipe.launch.vllm.base_url else "launch.vllm.port"
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise GrpoError(f"the server host {host!r} cannot be resolved: {exc.strerror}", where="launch.vllm.host",
                        fix="Use 0.0.0.0 (every interface) or an address of this machine.") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise GrpoError(f"port {port} on {host} is already in use (another vLLM server, or another program)",
                                where=where, fix=f"Stop what listens there (`ss -ltnp 'sport = :{port}'` names it), "
                                "or pick a free port with the override `launch.vllm.port=PORT` (give training the "
                                "same override).") from None
            raise GrpoError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", where="launch.vllm.host",
                            fix="Use 0.0.0.0 (every interface) or an address of this machine.") from None


def exec_server(cmd: list[str], extra_env: dict[str, str], recipe: Recipe | None = None) -> None:
    """Replace this process with the server (signals and exit code then belong to vLLM)."""
    if recipe is not None:
        check_port_free(recipe)

    if not installed("vllm"):
        raise GrpoError("`grpo vllm-serve` needs vLLM, which is not installed", where="vllm-serve",
                        fix="Install it with `pip install 'grpo-cli[vllm]'` on the machine with the server GPUs.")
    sys.stdout.flush()
    sys.stderr.flush()
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", *cmd[1:]]  # `vllm` of this environment
    os.execve(sys.executable, argv, {**os.environ, **server_env(recipe), **extra_env})


def wait_for_server(base_url: str, timeout: float, *, interval: float = 1.0, recipe_source: str = "",
                    alive: Callable[[], bool] | None = None) -> None:
    """Poll GET {base_url}/health until it answers 200; GrpoError after `timeout` seconds.

    Each poll waits at most 10 s for an answer, so a server busy loading on a loaded machine is asked
    again rather than given up on. `alive` (for a server this process started) ends the wait as soon as
    the server has exited instead of polling a dead port until the timeout.
    """
    url = base_url.rstrip("/") + HEALTH_PATH
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=max(0.1, min(10.0, remaining))) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = str(reason) or type(exc).__name__
        if alive is not None and not alive():
            raise GrpoError(f"the vLLM server for {url} exited while starting ({last})", where="launch.vllm",
                            fix="Read its log above; `grpo doctor RECIPE` checks the vLLM environment.")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval, remaining))
    recipe = recipe_source or "RECIPE"
    raise GrpoError(f"no vLLM server answered at {url} within {timeout:g}s ({last})", where="launch.vllm",
                    fix=f"Start it first, on the GPU(s) training leaves free: `grpo vllm-serve {recipe}` (same recipe, "
                        "so host and port match), or raise `launch.vllm.server_timeout` if it is still loading "
                        "(on CPU vLLM took 64-204 s to start on a loaded 2-core machine).")


def stop_server(proc: subprocess.Popen, grace: float = 30.0) -> int | None:
    """Stop a server started in its own session (`start_new_session=True`): SIGTERM to its process group
    (the API server and its engine core), SIGKILL to what is left after `grace` seconds. Its exit code."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return proc.poll()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the API server is gone; its engine core may still be shutting down
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                os.killpg(pgid, 0)
                time.sleep(0.2)
        except ProcessLookupError:
            break
    return proc.poll()
