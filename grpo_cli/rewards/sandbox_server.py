"""The warm sandbox: a bare interpreter that forks one locked-down child per program.

Started by `sandbox_client.py` as `python -I -S -B sandbox_server.py BASE_DIR [--once] [--netns]` (no
site-packages, no env vars, no cwd on sys.path); with `--netns` (root) it first moves into a new, empty
network namespace, which every child inherits. It reads length-prefixed JSON requests on stdin and answers on
stdout. For each request it makes a throwaway directory under BASE_DIR and forks a child that,
before running any user code, starts a new session, points fds 0-2 at its own files, closes every
other fd but its report pipe, moves into an empty working directory, scrubs the environment, sets
rlimits, and installs the seccomp filter and the Python guard (`sandbox_policy.py`).

Two kinds of request:
* `run`: one program with stdin, as `__main__`; the reply has its exit status and output.
* `tests`: one program and its tests, run in sequence in ONE child (a fresh `__main__` namespace
  per test). The child reports each test on its pipe; the server gives each test its own wall-clock
  deadline. A test that hangs, crashes or exits the process is scored as failed with the reason,
  and a fresh child carries on with the next test, so one bad test never costs the others.

Stdlib only: this file runs outside the `grpo_cli` package.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import shutil
import signal
import struct
import sys
import tempfile
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import sandbox_policy as policy  # noqa: E402  (a sibling file, loaded outside the package)

sys.path.remove(_HERE)

_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_REPORT_FD = 3
_REPORT_LINE_MAX = 4096  # a child that floods its report pipe is stopped, not buffered without end


def read_frame(fd: int) -> Any:
    """One length-prefixed JSON message, or None at end of input."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def write_frame(fd: int, message: Any) -> None:
    body = json.dumps(message).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------- server side


class _Job:
    """One request's files: the throwaway root, its empty working dir, and the output files."""

    def __init__(self, base: str, req: dict[str, Any]) -> None:
        self.req = req
        self.root = tempfile.mkdtemp(prefix="grpo-sandbox-", dir=base)
        self.work = os.path.join(self.root, "work")
        os.mkdir(self.work, 0o700)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self.out = os.open(os.path.join(self.root, "stdout"), flags, 0o600)
        self.err = os.open(os.path.join(self.root, "stderr"), flags, 0o600)

    def stdin_file(self, name: str, text: str) -> str:
        path = os.path.join(self.root, name)
        with open(path, "wb") as f:
            f.write(text.encode("utf-8", errors="replace"))
        return path

    def read(self, which: str, start: int = 0, limit: int = 1 << 20) -> bytes:
        with open(os.path.join(self.root, which), "rb") as f:
            f.seek(start)
            return f.read(limit)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def close(self) -> None:
        os.close(self.out)
        os.close(self.err)
        shutil.rmtree(self.root, ignore_errors=True)


_NPROC: list[float] = [0.0, 0.0]


def _limits(req: dict[str, Any], cpu: int, fsize: int) -> list[tuple[int, int, int]]:
    import resource

    if time.monotonic() - _NPROC[0] > 2.0:
        _NPROC[:] = [time.monotonic(), float(policy.nproc_limit())]
    mem = int(req["memory_mb"]) * 1024 * 1024
    return [
        (resource.RLIMIT_AS, mem, mem),
        (resource.RLIMIT_CPU, max(1, cpu), max(1, cpu) + 1),
        (resource.RLIMIT_FSIZE, fsize, fsize),
        (resource.RLIMIT_NOFILE, 64, 64),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, int(_NPROC[1]), int(_NPROC[1])),
    ]


def _spawn(job: _Job, stdin_path: str, limits: list[tuple[int, int, int]], start: int) -> tuple[int, int]:
    """Fork the child; it never returns into the server loop, whatever happens in it."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 70
        try:
            os.close(rfd)
            _enter_child(job, stdin_path, limits, wfd)
            from sandbox_runner import run_request  # type: ignore[import-not-found]

            status = run_request(job.req, job.root, start)
        except BaseException as exc:  # noqa: BLE001 - report why the sandbox itself failed
            with contextlib.suppress(BaseException):
                os.write(2, f"grpo sandbox: child setup failed: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(status)
    os.close(wfd)
    return pid, rfd


def _enter_child(job: _Job, stdin_path: str, limits: list[tuple[int, int, int]], wfd: int) -> None:
    """Everything between fork and user code: session, fds, directory, env, limits, filter, guard."""
    import resource

    os.setsid()
    policy.set_parent_death_signal()
    fd0 = os.open(stdin_path, os.O_RDONLY)
    os.dup2(fd0, 0)
    os.dup2(job.out, 1)
    os.dup2(job.err, 2)
    os.dup2(wfd, _REPORT_FD)
    os.closerange(_REPORT_FD + 1, 1 << 16)
    os.chdir(job.work)
    os.environ.clear()
    os.environ.update({**_ENV, "HOME": job.work, "TMPDIR": job.work})
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # type: ignore[attr-defined]
    for res, soft, hard in limits:
        with contextlib.suppress(BaseException):
            resource.setrlimit(res, (soft, hard))
    allow = bool(job.req.get("allow_file_writes"))
    policy.restrict_writes_to(job.work if allow else None)
    policy.install_seccomp(allow)
    policy.install_python_guard(allow)


def _reap(pid: int) -> int:
    """SIGKILL the child's whole group, then reap it: its pid cannot be reused before the wait."""
    with contextlib.suppress(BaseException):
        os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _wait_exit(pid: int, deadline: float) -> bool:
    """Wait for the child to exit (without reaping) until the deadline; True when it timed out."""
    try:
        pidfd = os.pidfd_open(pid)  # readable once the process exits: no polling delay
    except (AttributeError, OSError):
        pidfd = -1
    if pidfd >= 0:
        try:
            return not select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))[0]
        finally:
            os.close(pidfd)
    delay = 0.0005
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)
    return False


def handle_run(job: _Job) -> dict[str, Any]:
    """One program with stdin; what `run_python` returns, less the interpretation of the status."""
    req = job.req
    start = time.monotonic()
    cap = int(req["max_output_bytes"])
    limits = _limits(req, int(req["cpu_seconds"]), cap + 1)
    pid, rfd = _spawn(job, job.stdin_file("stdin", req.get("stdin", "")), limits, 0)
    os.close(rfd)
    timed_out = _wait_exit(pid, start + float(req["timeout"]))
    rc = _reap(pid)
    out, err = job.read("stdout", 0, cap + 1), job.read("stderr", 0, cap + 1)
    return {"returncode": rc, "timed_out": timed_out, "duration": time.monotonic() - start,
            "stdout": out[:cap].decode("utf-8", "replace"), "stderr": err[:cap].decode("utf-8", "replace"),
            "truncated": len(out) > cap or len(err) > cap}


def _death_reason(rc: int, timed_out: bool) -> str:
    if timed_out:
        return "timeout"
    if rc == -signal.SIGXCPU:
        return "cpu_limit"
    if rc == -signal.SIGXFSZ:
        return "output_limit"
    if rc < 0:
        return f"killed by {policy.signal_name(rc) or f'signal {-rc}'}"
    return f"the process exited with status {rc} during the test"


def handle_tests(job: _Job) -> dict[str, Any]:
    """Run the tests in as few children as their crashes allow; one outcome per test."""
    req, tests = job.req, job.req["tests"]
    n, start_time = len(tests), time.monotonic()
    caps = [int(t.get("cap", req["max_output_bytes"])) for t in tests]
    for i, test in enumerate(tests):
        if "stdin" in test:
            job.stdin_file(f"stdin-{i}", test["stdin"])
    outcomes: list[dict[str, Any]] = []
    children = 0
    while len(outcomes) < n:
        first = len(outcomes)
        fsize = max(job.size(job.out), job.size(job.err)) + sum(caps[first:]) + 1
        limits = _limits(req, int(req["cpu_seconds"]) * (n - first) + 1, fsize)
        pid, rfd = _spawn(job, os.devnull, limits, first)
        children += 1
        outcomes += _supervise(job, pid, rfd, first, float(req["timeout"]))
    for i, (test, outcome) in enumerate(zip(tests, outcomes, strict=True)):
        if "stdin" in test and outcome["status"] == "done":
            begin, end = outcome.pop("span")
            if end - begin > caps[i]:
                outcome.update(status="fail", reason="output_limit")
            else:
                outcome["stdout"] = job.read("stdout", begin, end - begin).decode("utf-8", "replace")
        outcome.pop("span", None)
    stderr = job.read("stderr", max(0, job.size(job.err) - 2000), 2000).decode("utf-8", "replace")
    return {"outcomes": outcomes, "stderr_tail": stderr, "children": children,
            "duration": time.monotonic() - start_time}


def _supervise(job: _Job, pid: int, rfd: int, first: int, timeout: float) -> list[dict[str, Any]]:
    """Collect the child's reports from test `first` on; stop at its first failure to report in time."""
    outcomes: list[dict[str, Any]] = []
    n, buf = len(job.req["tests"]), b""
    nonce = job.req["nonce"]
    mark = job.size(job.out)
    deadline = time.monotonic() + timeout
    try:
        while first + len(outcomes) < n:
            index = first + len(outcomes)
            left = deadline - time.monotonic()
            ready = select.select([rfd], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                _reap(pid)
                outcomes.append({"status": "fail", "reason": "timeout", "index": index})
                return outcomes
            chunk = os.read(rfd, 65536)
            if not chunk:
                _wait_exit(pid, time.monotonic() + 1.0)  # EOF: the child is exiting or dead
                rc = _reap(pid)
                outcomes.append({"status": "fail", "reason": _death_reason(rc, False), "index": index})
                return outcomes
            buf += chunk
            while b"\n" in buf and first + len(outcomes) < n:
                line, buf = buf.split(b"\n", 1)
                report = _parse_report(line, nonce, first + len(outcomes))
                if report is None:
                    _reap(pid)
                    outcomes.append({"status": "fail", "reason": "the test report was tampered with",
                                     "index": first + len(outcomes)})
                    return outcomes
                end = min(max(report.pop("end"), mark), job.size(job.out))
                report["span"] = (mark, end)
                mark = end
                outcomes.append(report)
                deadline = time.monotonic() + timeout
            if len(buf) > _REPORT_LINE_MAX:
                _reap(pid)
                outcomes.append({"status": "fail", "reason": "the test report was tampered with",
                                 "index": first + len(outcomes)})
                return outcomes
        _reap(pid)
        return outcomes
    finally:
        os.close(rfd)


def _parse_report(line: bytes, nonce: str, index: int) -> dict[str, Any] | None:
    """`NONCE INDEX STATUS STDOUT_END [REASON]` -> outcome; None for anything else (forged or garbled)."""
    parts = line.decode("utf-8", "replace").split(" ", 4)
    if (len(parts) < 4 or parts[0] != nonce or parts[1] != str(index) or parts[2] not in ("pass", "fail", "done")
            or not parts[3].lstrip("-").isdigit()):
        return None
    return {"status": parts[2], "end": int(parts[3]), "reason": parts[4] if len(parts) > 4 else None, "index": index}


def handle(base: str, req: dict[str, Any]) -> dict[str, Any]:
    job = _Job(base, req)
    try:
        return handle_tests(job) if req["kind"] == "tests" else handle_run(job)
    finally:
        job.close()


def _preload() -> None:
    """Import in the server what every child needs, so no child pays for it."""
    import builtins  # noqa: F401
    import ctypes  # noqa: F401  (seccomp and capabilities)
    import io  # noqa: F401
    import logging  # noqa: F401  (its import registers fork handlers, which the guard refuses in a child)
    import resource  # noqa: F401
    import socket  # noqa: F401  (patched by the guard)
    import subprocess  # noqa: F401  (patched by the guard)
    import threading  # noqa: F401
    import traceback  # noqa: F401
    import types  # noqa: F401

    sys.path.insert(0, _HERE)
    import sandbox_runner  # type: ignore[import-not-found]  # noqa: F401

    sys.path.remove(_HERE)
    if sys.platform == "linux" and platform.machine() == "x86_64":
        policy.prepare_seccomp(False)
        policy.prepare_seccomp(True)
    policy.set_parent_death_signal(prepare_only=True)
    policy.landlock_abi()
    policy.guard_patches()
    # No PR_SET_PDEATHSIG for the server itself: it fires when the parent *thread* that started it exits
    # (a reward's worker thread); the server ends on end-of-input instead, when its parent is gone.
    import gc

    gc.freeze()  # children's collections then skip the server's objects (fewer copy-on-write faults)


def main(argv: list[str]) -> int:
    """Serve requests until stdin closes (`--once`: serve one, the cold path)."""
    base, once = argv[1], "--once" in argv[2:]
    if "--netns" in argv[2:]:
        policy.enter_empty_network_namespace()
    req_fd, rep_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _preload()
    write_frame(rep_fd, {"ready": True, "pid": os.getpid()})
    try:
        while True:
            req = read_frame(req_fd)
            if req is None:
                return 0
            try:
                reply = handle(base, req)
            except Exception as exc:  # a bad request or a full disk: answer, keep serving
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            write_frame(rep_fd, {**reply, "id": req.get("id")})
            if once:
                return 0
    finally:
        # A parent killed by SIGKILL never runs its `stop_server`: its end of input is our cue to clean up.
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
