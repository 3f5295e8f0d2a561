"""The warm sandbox server cleans up after itself even when the process that started it is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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
