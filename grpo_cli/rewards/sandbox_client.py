"""Parent side of the warm sandbox: start fork servers, talk to them, restart them when they die.

A `SandboxPool` holds up to N servers (`sandbox_server.py`, one bare interpreter each, inside an
empty network namespace when this process may create one: root). A call checks out an idle server, so
N threads can run N programs at once; servers start lazily and live until the process exits, so
a training run pays their start-up (~0.1 s each) once, not per step. A server that dies or stops
answering is killed with its process group and replaced on the next call; the call that was in
flight gets `SandboxCrash` with the reason, never a hang.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from grpo_cli.threads import free_cores

SERVER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_server.py")
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
MAX_WORKERS = 32


class SandboxCrash(RuntimeError):
    """The sandbox server died or hung while running a request (it is restarted on the next call)."""


def default_workers() -> int:
    """One server per core that other work leaves free (this process waits while they run), at most MAX_WORKERS."""
    return max(1, min(free_cores(own=1.0), MAX_WORKERS))


def _scratch_root() -> str | None:
    """A memory filesystem for the per-program directories when there is one (no disk journal to wait
    on: creating and removing a directory there is ~100x cheaper than on an ext4 /tmp), else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def spawn_server(isolate_network: bool, once: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    """Start one server; returns the process and its base directory (removed by `stop_server`)."""
    base = tempfile.mkdtemp(prefix="grpo-sandbox-server-", dir=_scratch_root())
    flags = (["--once"] if once else []) + (["--netns"] if isolate_network and os.geteuid() == 0 else [])
    # No preexec_fn: it is unsafe in a threaded process (the reward calls this from worker threads,
    # next to torch's); the server moves itself into a new network namespace instead.
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", SERVER_SCRIPT, base, *flags], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=base, env=_ENV, close_fds=True,
                            start_new_session=True)
    return proc, base


def stop_server(proc: subprocess.Popen[bytes], base: str) -> str:
    """Kill the server's group, reap it, remove its files; returns what it said on stderr."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    said = ""
    if proc.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            os.set_blocking(proc.stderr.fileno(), False)
            said = (proc.stderr.read(4000) or b"").decode("utf-8", "replace")
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    shutil.rmtree(base, ignore_errors=True)
    return said.strip()


def send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    import json

    assert proc.stdin is not None
    body = json.dumps(message).encode()
    proc.stdin.write(struct.pack(">I", len(body)) + body)
    proc.stdin.flush()


def receive(proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
    """The next reply; EOFError when the server closed, TimeoutError past the deadline."""
    import json

    assert proc.stdout is not None
    fd = proc.stdout.fileno()

    def exact(n: int) -> bytes:
        chunks, left = [], n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError("the sandbox server did not answer in time")
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError("the sandbox server closed its pipe")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    return json.loads(exact(struct.unpack(">I", exact(4))[0]))  # type: ignore[no-any-return]


class SandboxServer:
    """One warm fork server, restarted after a crash; not thread-safe (the pool hands it to one caller)."""

    def __init__(self, isolate_network: bool = True) -> None:
        self.isolate_network = isolate_network
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._base = ""
        self._serial = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            stop_server(self._proc, self._base)
            self.restarts += 1
        self._proc, self._base = spawn_server(self.isolate_network)
        try:
            receive(self._proc, time.monotonic() + 30.0)  # the server says it is ready
        except (EOFError, TimeoutError, OSError, ValueError) as exc:
            said = stop_server(self._proc, self._base)
            self._proc = None
            raise SandboxCrash(f"the sandbox server could not start: {exc} {said}".strip()) from None
        return self._proc

    def call(self, request: dict[str, Any], budget: float) -> dict[str, Any]:
        """Send one request; `budget` seconds for the answer before the server counts as hung."""
        proc = self._ensure()
        self._serial += 1
        try:
            send(proc, {**request, "id": self._serial})
            reply = receive(proc, time.monotonic() + budget)
            if reply.get("id") != self._serial:
                raise ValueError("the sandbox server answered another request")
        except BaseException as exc:
            if not isinstance(exc, EOFError | TimeoutError | OSError | ValueError):
                # Interrupted (a reward timeout, Ctrl-C): the answer would arrive later and be read as the
                # next request's, so this server is replaced rather than reused.
                stop_server(proc, self._base)
                self._proc = None
                self.restarts += 1
                raise
            status = None
            if not isinstance(exc, TimeoutError):  # its pipe closed: it is exiting, give the kernel a moment
                with contextlib.suppress(subprocess.TimeoutExpired):
                    status = proc.wait(timeout=2.0)
            said = stop_server(proc, self._base)
            self._proc = None
            self.restarts += 1
            if isinstance(exc, TimeoutError):
                why = f"stopped answering for {budget:.0f} s"
            elif status is not None and status < 0:
                why = f"died ({signal.Signals(-status).name})" if -status in signal.valid_signals() else "died"
            else:
                why = f"died (exit status {status})" if status is not None else "closed its pipe"
            detail = f": {said.splitlines()[-1]}" if said else ""
            raise SandboxCrash(f"the sandbox server {why} while running this program{detail}; "
                               "it was restarted") from None
        if "error" in reply:
            raise SandboxCrash(f"the sandbox server could not run this program: {reply['error']}")
        return reply

    def close(self) -> None:
        if self._proc is not None:
            stop_server(self._proc, self._base)
            self._proc = None


class SandboxPool:
    """Up to `size` warm servers shared by threads; grows on demand, lives for the process."""

    def __init__(self, isolate_network: bool = True) -> None:
        self.isolate_network = isolate_network
        self._idle: queue.LifoQueue[SandboxServer] = queue.LifoQueue()
        self._all: list[SandboxServer] = []
        self._lock = threading.Lock()
        self._probed = False

    def ensure(self, size: int) -> None:
        """Make at least `size` servers available (they start on first use)."""
        with self._lock:
            while len(self._all) < size:
                server = SandboxServer(self.isolate_network)
                self._all.append(server)
                self._idle.put(server)

    def call(self, request: dict[str, Any], budget: float) -> dict[str, Any]:
        if not self._all:
            self.ensure(1)
        server = self._idle.get()
        try:
            return server.call(request, budget)
        finally:
            self._idle.put(server)

    def first_use(self) -> bool:
        """True exactly once per pool: its start, when the caller checks the isolation layers."""
        with self._lock:
            first, self._probed = not self._probed, True
        return first

    @property
    def servers(self) -> list[SandboxServer]:
        return list(self._all)

    def close(self) -> None:
        with self._lock:
            for server in self._all:
                server.close()


_POOLS: dict[bool, SandboxPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(isolate_network: bool = True) -> SandboxPool:
    """The process-wide pool (one per network setting), reused across calls and training steps."""
    with _POOLS_LOCK:
        if isolate_network not in _POOLS:
            _POOLS[isolate_network] = SandboxPool(isolate_network)
        return _POOLS[isolate_network]


@atexit.register
def _close_pools() -> None:
    for pool in list(_POOLS.values()):
        pool.close()


def call_cold(request: dict[str, Any], budget: float, isolate_network: bool = True) -> dict[str, Any]:
    """One request on a fresh interpreter started for it (the pre-server cost; benchmarks, fallback)."""
    proc, base = spawn_server(isolate_network, once=True)
    try:
        receive(proc, time.monotonic() + 30.0)
        send(proc, request)
        return receive(proc, time.monotonic() + budget)
    except (EOFError, TimeoutError, OSError, ValueError) as exc:
        raise SandboxCrash(f"the sandbox process failed: {exc}") from None
    finally:
        stop_server(proc, base)
