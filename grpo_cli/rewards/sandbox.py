"""Run untrusted, model-written Python in throwaway, resource-limited, locked-down processes.

GRPO code rewards execute whatever the policy wrote, thousands of times per step, often as root
on a GPU box. Every program runs in its own process, defended in layers so that no single bypass
is enough:

* process: forked by a warm server (`sandbox_server.py`: a bare `python -I -S -B`, so no
  site-packages, no env vars, no cwd on sys.path, no .pyc writes), in a new session, in a fresh
  empty working directory deleted afterwards, with a scrubbed environment; its whole process group
  is SIGKILLed when it ends or times out, and it dies with its server (PR_SET_PDEATHSIG).
* rlimits: address space, CPU time, file size (which also caps output), open files, processes,
  no core dumps.
* network: a fresh, empty network namespace when the kernel allows it (root), made once per server.
* kernel syscall filter (seccomp-bpf, Linux x86-64, `sandbox_policy.py`): no fork/exec/kill/
  socket/ptrace/mount, no call that changes the filesystem (mkdir, unlink, rename, chmod, utime,
  truncate, xattrs...), no opening files for writing, no raising rlimits; capabilities dropped.
* in the interpreter: a PEP 578 audit hook (cannot be removed once added) refusing the same
  operations and imports of ctypes/multiprocessing, plus human-eval style monkeypatching of `os`,
  `shutil`, `subprocess` and `socket` so the refusal comes with a clear message.

`run_python` runs one program; `run_tests` runs a program against its tests in ONE process
(tests in sequence, each with its own deadline; a test that crashes the process costs only
itself). Servers are pooled per process (`sandbox_client.py`) and reused across calls.

This file is also imported on its own, outside the package, by a bare interpreter (to load only
the kernel filter), so its top level imports nothing but the stdlib and its sibling policy file.
"""

from __future__ import annotations

import logging
import math
import secrets
import signal
import time
from dataclasses import dataclass, field
from typing import Any

try:
    from grpo_cli.rewards.sandbox_policy import install_seccomp as _install_seccomp, seccomp_program, signal_name
except ImportError:  # imported from this directory by a bare `python -I -S` (see the module docstring)
    from sandbox_policy import (  # type: ignore[no-redef]
        install_seccomp as _install_seccomp,
        seccomp_program,
        signal_name,
    )

__all__ = ["SandboxResult", "TestOutcome", "TestsResult", "missing_layers", "probe_isolation", "run_python",
           "run_tests", "seccomp_program"]
_ = _install_seccomp  # re-exported for the kernel-filter test


@dataclass
class SandboxResult:
    """What a sandboxed program did. `stdout`/`stderr` hold at most `max_output_bytes` each."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None
    duration: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """True when the program exited 0 on its own, within every limit."""
        return self.returncode == 0 and not self.timed_out and self.killed_reason is None


@dataclass
class TestOutcome:
    """One test: `passed` is final for assert tests; stdin/stdout cases carry the program's `stdout`."""

    passed: bool
    reason: str | None = None
    stdout: str | None = None


@dataclass
class TestsResult:
    """A program against its tests; `error` is set when the sandbox itself failed (then nothing passed)."""

    outcomes: list[TestOutcome]
    duration: float
    processes: int = 1
    error: str | None = None
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def run_python(
    code: str,
    stdin: str = "",
    *,
    timeout: float = 5.0,
    memory_mb: int = 512,
    cpu_seconds: int | None = None,
    max_output_bytes: int = 65536,
    allow_file_writes: bool = False,
    isolate_network: bool = True,
    warm: bool = True,
) -> SandboxResult:
    """Run `code` as `__main__` with `stdin`, in isolation; never raises for what the code does.

    `timeout` is wall-clock seconds; `cpu_seconds` defaults to ceil(timeout) + 1. Output past
    `max_output_bytes` (per stream) stops the program (`killed_reason="output_limit"`).
    `allow_file_writes=True` lets the program open files for writing (still size-capped; see
    sandbox_policy for what that mode cannot confine); by default every open-for-writing fails.
    `warm=False` starts a fresh interpreter for this one program (the old, slower path).
    """
    from grpo_cli.rewards.sandbox_client import SandboxCrash, call_cold

    start = time.monotonic()
    request = {"kind": "run", "source": code, "stdin": stdin, "timeout": timeout, "memory_mb": memory_mb,
               "cpu_seconds": cpu_seconds if cpu_seconds is not None else math.ceil(timeout) + 1,
               "max_output_bytes": max_output_bytes, "allow_file_writes": allow_file_writes}
    budget = timeout + 30.0
    try:
        reply = _pool(isolate_network).call(request, budget) if warm else call_cold(request, budget, isolate_network)
    except SandboxCrash as exc:
        return SandboxResult(-1, "", str(exc), False, "sandbox_failed", time.monotonic() - start)
    rc, cut, stderr = int(reply["returncode"]), bool(reply["truncated"]), reply["stderr"]
    reason = _killed_reason(rc, bool(reply["timed_out"]), cut, stderr)
    return SandboxResult(rc, reply["stdout"], stderr, bool(reply["timed_out"]), reason, float(reply["duration"]), cut)


def run_tests(
    program: str,
    tests: list[dict[str, Any]],
    *,
    timeout: float = 5.0,
    memory_mb: int = 512,
    max_output_bytes: int = 65536,
    isolate_network: bool = True,
) -> TestsResult:
    """Run `program` against `tests` in one sandboxed process; never raises for what the code does.

    Each test is `{"script": code}` (passes when the program then the code run to the end) or
    `{"stdin": text, "cap": bytes}` (its stdout comes back to compare). `timeout` is per test.
    """
    from grpo_cli.rewards.sandbox_client import SandboxCrash

    start = time.monotonic()
    request = {"kind": "tests", "source": program, "tests": tests, "timeout": timeout, "memory_mb": memory_mb,
               "cpu_seconds": math.ceil(timeout) + 1, "max_output_bytes": max_output_bytes,
               "nonce": secrets.token_hex(8), "allow_file_writes": False}
    try:
        reply = _pool(isolate_network).call(request, timeout * len(tests) + 30.0)
    except SandboxCrash as exc:
        return TestsResult([TestOutcome(False, str(exc)) for _ in tests], time.monotonic() - start, error=str(exc))
    outcomes = [TestOutcome(o["status"] == "pass", o.get("reason"), o.get("stdout")) for o in reply["outcomes"]]
    return TestsResult(outcomes, float(reply["duration"]), int(reply["children"]),
                       stderr_tail=reply.get("stderr_tail", ""))


def probe_isolation(isolate_network: bool = True) -> dict[str, bool]:
    """Which defence layers are active on this machine (for `grpo doctor`-style reports and tests)."""
    import os

    probe = (
        "import os\n"
        "status = open('/proc/self/status').read() if os.path.exists('/proc/self/status') else ''\n"
        "seccomp = any(l.split()[1:] == ['2'] for l in status.splitlines() if l.startswith('Seccomp:'))\n"
        "ns = os.readlink('/proc/self/ns/net') if os.path.exists('/proc/self/ns/net') else ''\n"
        "print(int(seccomp), ns)\n"
    )
    result = run_python(probe, timeout=10.0, isolate_network=isolate_network)
    parts = result.stdout.split()
    try:
        host_ns = os.readlink("/proc/self/ns/net")
    except OSError:
        host_ns = ""
    return {
        "runs": result.ok,
        "seccomp": bool(parts) and parts[0] == "1",
        "network_namespace": len(parts) > 1 and bool(host_ns) and parts[1] != host_ns,
    }


def missing_layers(isolate_network: bool = True) -> list[str]:
    """The kernel layers this machine does not give the sandbox, in words (empty when all are there)."""
    found = probe_isolation(isolate_network)
    if not found["runs"]:
        return ["a working sandbox (the probe program failed)"]
    missing = [] if found["seccomp"] else ["the seccomp filter (x86-64 Linux only)"]
    if isolate_network and not found["network_namespace"]:
        missing.append("the empty network namespace (needs root)")
    return missing


def _pool(isolate_network: bool) -> Any:
    """The shared pool; at its start, one warning naming the isolation layers this machine lacks."""
    from grpo_cli.rewards.sandbox_client import shared_pool

    pool = shared_pool(isolate_network)
    if pool.first_use():  # the probe's own run finds the pool already used: no recursion
        try:
            missing = missing_layers(isolate_network)
        except Exception as exc:  # noqa: BLE001 - a failed probe is itself worth the warning
            missing = [f"a working sandbox ({type(exc).__name__}: {exc})"]
        if missing:
            logging.getLogger(__name__).warning(
                "code sandbox: running without %s on this machine; the interpreter guard, rlimits and "
                "process-group kill still apply (see docs/rewards.md, the code sandbox)", ", ".join(missing))
    return pool


def _killed_reason(rc: int, timed_out: bool, truncated: bool, stderr: str) -> str | None:
    if timed_out:
        return "timeout"
    if truncated:
        return "output_limit"
    if rc == -signal.SIGXCPU:
        return "cpu_limit"
    if rc < 0:
        return f"signal:{signal_name(rc) or -rc}"
    if rc != 0 and "MemoryError" in stderr[-2000:]:
        return "memory_limit"
    return None
