"""The warm sandbox server cleans up after itself even when the process that started it is SIGKILLed."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

STARTER = (
    "from grpo_cli.rewards.sandbox_client import spawn_server\n"
    "proc, base = spawn_server(False)\n"
    "proc.stdout.read(4)\n"  # the server's ready frame has begun: it is past its start-up
    "print(base, proc.pid, flush=True)\n"
    "import time\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_server_directory_is_removed_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        base, pid = parent.stdout.readline().split()
        assert os.path.isdir(base) and _alive(int(pid))
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 15
    while (os.path.exists(base) or _alive(int(pid))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(base) and not _alive(int(pid))


def test_pool_start_warns_once_naming_the_missing_layers(monkeypatch: Any, caplog: Any) -> None:
    """The probe program's output says: no seccomp, the host's network namespace (as on non-x86-64, non-root)."""
    from grpo_cli.rewards import sandbox, sandbox_client
    from grpo_cli.rewards.builtins.code import code

    host_ns = os.readlink("/proc/self/ns/net")
    probe_output = sandbox.SandboxResult(0, f"0 {host_ns}\n", "", False, None, 0.01)
    real = sandbox.run_python
    monkeypatch.setattr(sandbox, "run_python",
                        lambda source, *a, **k: probe_output if "Seccomp:" in source else real(source, *a, **k))
    monkeypatch.setattr(sandbox_client, "_POOLS", {})  # a pool that starts now
    program = "```python\ndef add(a, b):\n    return a + b\n```"
    try:
        with caplog.at_level(logging.WARNING, logger="grpo_cli.rewards.sandbox"):
            assert code([program, program], tests=[["assert add(1, 2) == 3"]] * 2) == [1.0, 1.0]
    finally:
        for pool in sandbox_client._POOLS.values():
            pool.close()
    warnings = [r.getMessage() for r in caplog.records if "running without" in r.getMessage()]
    assert len(warnings) == 1 and "seccomp filter" in warnings[0] and "network namespace" in warnings[0]
