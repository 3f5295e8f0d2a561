"""The vLLM generation server for `launch.vllm.mode: server`, built from the same recipe.

`grpo vllm-serve RECIPE` runs TRL's `trl vllm-serve` with the model, revision, port and
engine settings the trainer will expect, so the two sides cannot drift apart. Training
calls `wait_for_server` before loading the model, so a server that is not up is reported
in seconds with the command to start it, not after minutes of model loading.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError

# The path TRL 1.16's VLLMClient polls (vLLM's own server answers it; `/health/` redirects there).
HEALTH_PATH = "/health"


def server_base_url(recipe: Any) -> str:
    """The URL the trainer will contact: launch.vllm.base_url, else http://host:port."""
    v = recipe.launch.vllm
    return (v.base_url or f"http://{v.host}:{v.port}").rstrip("/")


def _bind_address(recipe: Any) -> tuple[str, int]:
    """Where the server listens: the host and port of base_url when given, else launch.vllm.host/port."""
    v = recipe.launch.vllm
    if v.base_url:
        from urllib.parse import urlparse

        parsed = urlparse(v.base_url)
        return parsed.hostname or v.host, parsed.port or (443 if parsed.scheme == "https" else 80)
    return v.host, v.port


def vllm_serve_command(recipe: Any) -> list[str]:
    """`trl vllm-serve` with the flags (TRL 1.16 ScriptArguments names) this recipe needs.

    gpu_memory_utilization is passed only when the recipe sets it: its schema default (0.3) is
    meant for colocate mode, while a dedicated server should keep TRL's 0.9.
    """
    from grpo_cli.models.loading import model_reference

    v = recipe.launch.vllm
    if v.mode != "server":
        raise GrpoError(f"launch.vllm.mode is {v.mode!r}; a separate vLLM server is only used in server mode",
                        where="launch.vllm.mode",
                        fix="Add the override `launch.vllm.mode=server` (and use the same recipe for training).")
    if v.tensor_parallel_size > max(v.server_gpus, 1):
        raise GrpoError(f"tensor_parallel_size {v.tensor_parallel_size} needs {v.tensor_parallel_size} GPUs but "
                        f"launch.vllm.server_gpus is {v.server_gpus}", where="launch.vllm.server_gpus",
                        fix=f"Set `launch.vllm.server_gpus: {v.tensor_parallel_size}` so training leaves them free.")
    m = recipe.model
    host, port = _bind_address(recipe)
    cmd = ["trl", "vllm-serve", "--model", model_reference(recipe)]
    if m.revision:
        cmd += ["--revision", m.revision]
    cmd += ["--tensor_parallel_size", str(v.tensor_parallel_size), "--host", host, "--port", str(port)]
    if "gpu_memory_utilization" in v.model_fields_set:
        cmd += ["--gpu_memory_utilization", f"{v.gpu_memory_utilization:g}"]
    if m.dtype != "auto":
        cmd += ["--dtype", m.dtype]
    if v.max_model_length:
        cmd += ["--max_model_len", str(v.max_model_length)]
    if m.trust_remote_code:
        cmd.append("--trust_remote_code")
    return cmd


def server_gpu_env(recipe: Any, gpus: int | None = None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for the server: the last `server_gpus` GPUs, which training leaves free.

    `grpo train` with N processes uses GPUs 0..N-1, so on an 8-GPU node with server_gpus: 1 the
    server belongs on GPU 7. Nothing is set when the user already chose (CUDA_VISIBLE_DEVICES).
    """
    environ = dict(os.environ) if environ is None else environ
    k = recipe.launch.vllm.server_gpus
    if "CUDA_VISIBLE_DEVICES" in environ or k < 1:
        return {}
    if gpus is None:
        from grpo_cli.training.launch import visible_gpu_count

        gpus = visible_gpu_count()
    if gpus <= k:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus - k, gpus))}


def _trl_executable() -> str:
    found = shutil.which("trl") or str(Path(sys.executable).with_name("trl"))
    if not Path(found).exists():
        raise GrpoError("the `trl` command is not on PATH", where="vllm-serve",
                        fix="Activate the environment grpo is installed in (TRL installs `trl` next to `grpo`).")
    return found


def exec_server(cmd: list[str], extra_env: dict[str, str]) -> None:
    """Replace this process with the server (signals and exit code then belong to vLLM)."""
    from grpo_cli.validation.topology import installed

    if not installed("vllm"):
        raise GrpoError("`grpo vllm-serve` needs vLLM, which is not installed", where="vllm-serve",
                        fix="Install it with `pip install 'grpo-cli[vllm]'` on the machine with the server GPUs.")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(_trl_executable(), cmd, {**os.environ, **extra_env})


def wait_for_server(base_url: str, timeout: float, *, interval: float = 1.0, recipe_source: str = "") -> None:
    """Poll GET {base_url}/health until it answers 200; GrpoError after `timeout` seconds."""
    url = base_url.rstrip("/") + HEALTH_PATH
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=max(0.1, min(5.0, remaining))) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = str(reason) or type(exc).__name__
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval, remaining))
    recipe = recipe_source or "RECIPE"
    raise GrpoError(f"no vLLM server answered at {url} within {timeout:g}s ({last})", where="launch.vllm",
                    fix=f"Start it first, on the GPU(s) training leaves free: `grpo vllm-serve {recipe}` (same recipe, "
                        "so host and port match), or raise `launch.vllm.server_timeout` if it is still loading.")
