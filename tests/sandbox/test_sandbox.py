"""The sandbox against hostile programs: each defence is shown to hold, not just to exist."""

from __future__ import annotations

import errno
import os
import platform
import select
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_cli.rewards import sandbox
from grpo_cli.rewards.sandbox import SandboxResult, probe_isolation, run_python, seccomp_program

LINUX_X86 = sys.platform == "linux" and platform.machine() == "x86_64"


def _host_processes() -> int:
    return sum(1 for p in os.listdir("/proc") if p.isdigit())


def test_runs_code_with_stdin_and_reports() -> None:
    r = run_python("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "1 2 3\n")
    assert isinstance(r, SandboxResult)
    assert (r.returncode, r.stdout, r.timed_out, r.killed_reason, r.ok) == (0, "6\n", False, None, True)
    bad = run_python("x = 1\n1/0")
    assert bad.returncode == 1 and not bad.ok
    assert 'File "solution.py", line 2' in bad.stderr and "ZeroDivisionError" in bad.stderr
    assert run_python("raise SystemExit(3)").returncode == 3


def test_isolated_interpreter_fresh_dir_deleted_and_env_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPO_SECRET_TOKEN", "hunter2")
    code = textwrap.dedent("""
        import os, sys
        print(os.getcwd())
        print(sorted(os.environ))
        print(sys.flags.isolated, sys.flags.no_site, os.listdir('.'))
        print(os.getpgrp() == os.getpid())
    """)
    r = run_python(code)
    cwd, env, flags, own_group = r.stdout.splitlines()
    assert "hunter2" not in r.stdout and "GRPO_SECRET_TOKEN" not in env
    assert env == str(sorted(["HOME", "LANG", "LC_ALL", "PATH", "TMPDIR"]))
    assert flags == "1 1 []"  # -I -S, and the working directory starts empty
    assert own_group == "True"  # its own session/process group, so the group can be killed
    assert not os.path.exists(cwd) and not os.path.exists(os.path.dirname(cwd))


def test_infinite_loop_times_out_quickly() -> None:
    r = run_python("while True:\n    pass", timeout=1.0)
    assert r.timed_out and r.killed_reason == "timeout" and not r.ok
    assert r.duration < 3.0


def test_cpu_limit_kills_busy_program() -> None:
    r = run_python("while True:\n    pass", timeout=20.0, cpu_seconds=1)
    assert not r.timed_out and r.killed_reason == "cpu_limit"
    assert r.duration < 5.0


def test_fork_bomb_is_contained() -> None:
    before = _host_processes()
    r = run_python("import os\nwhile True:\n    os.fork()", timeout=5.0)
    assert r.returncode != 0 and not r.timed_out and r.duration < 3.0
    assert "PermissionError" in r.stderr
    # A determined bomb that goes around the Python-level guard.
    determined = textwrap.dedent("""
        import sys
        for name in ("ctypes", "_ctypes", "_posixsubprocess"):
            sys.modules.pop(name, None)
        try:
            import ctypes
            libc = ctypes.CDLL(None)
            while True:
                libc.fork()
        except BaseException as e:
            print("ctypes:", type(e).__name__)
        import posix
        while True:
            posix.fork()
    """)
    r2 = run_python(determined, timeout=5.0)
    assert r2.returncode != 0 and r2.duration < 3.0 and "ctypes: ImportError" in r2.stdout
    assert _host_processes() < before + 20


def test_huge_and_endless_output_is_capped() -> None:
    r = run_python("print('x' * 10**9)", max_output_bytes=1000)
    assert not r.ok and r.duration < 5.0 and len(r.stdout) <= 1000
    assert r.killed_reason in ("memory_limit", "output_limit")
    r2 = run_python("while True:\n    print('y' * 1000)", max_output_bytes=5000, timeout=5.0)
    assert r2.killed_reason == "output_limit" and r2.truncated and not r2.timed_out
    assert len(r2.stdout) == 5000 and set(r2.stdout) <= {"y", "\n"}


def test_memory_hog_fails_fast() -> None:
    r = run_python("x = bytearray(10**10)\nprint('allocated')", memory_mb=256)
    assert r.returncode != 0 and "allocated" not in r.stdout and r.duration < 5.0
    assert r.killed_reason == "memory_limit"


def test_cannot_delete_or_overwrite_files_outside(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    code = textwrap.dedent(f"""
        import os, shutil, pathlib, posix
        target = {str(victim)!r}
        attempts = [
            lambda: shutil.rmtree(target),
            lambda: os.remove(target + "/keep.txt"),
            lambda: posix.unlink(target + "/keep.txt"),
            lambda: pathlib.Path(target, "keep.txt").unlink(),
            lambda: os.rename(target, target + "-moved"),
            lambda: open(target + "/keep.txt", "w").write("gone"),
            lambda: os.open(target + "/keep.txt", os.O_WRONLY | os.O_TRUNC),
            lambda: os.chdir(target),
        ]
        refused = 0
        for attempt in attempts:
            try:
                attempt()
            except (OSError, ImportError):
                refused += 1
        print(refused, len(attempts))
    """)
    r = run_python(code)
    assert r.stdout.split() == ["8", "8"], r.stderr
    assert (victim / "keep.txt").read_text() == "precious"


def test_file_writes_opt_in_stay_in_the_sandbox() -> None:
    code = "open('scratch.txt', 'w').write('hi')\nprint(open('scratch.txt').read())"
    assert run_python(code).returncode != 0
    r = run_python(code, allow_file_writes=True)
    assert r.ok and r.stdout == "hi\n"


def test_no_network_to_localhost() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    code = textwrap.dedent(f"""
        import socket, _socket, sys
        results = []
        for make in (lambda: socket.create_connection(("127.0.0.1", {port}), timeout=1),
                     lambda: socket.socket().connect(("127.0.0.1", {port})),
                     lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM).connect(("127.0.0.1", {port}))):
            try:
                make()
                results.append("connected")
            except OSError as e:
                results.append(type(e).__name__)
        print(results)
    """)
    try:
        r = run_python(code, timeout=5.0)
        assert "connected" not in r.stdout and r.stdout.startswith("["), r.stderr
        readable, _, _ = select.select([listener], [], [], 0.2)
        assert readable == []  # nothing ever reached the listener
    finally:
        listener.close()


def test_ordinary_programs_still_work() -> None:
    code = textwrap.dedent("""
        import threading, json, math, random, collections, heapq, fractions, re
        out = []
        t = threading.Thread(target=lambda: out.append(math.factorial(10)))
        t.start(); t.join()
        print(out[0], json.dumps({"a": 1}), sorted(collections.Counter("aab").items()))
    """)
    r = run_python(code)
    assert r.ok, r.stderr
    assert r.stdout == "3628800 {\"a\": 1} [('a', 2), ('b', 1)]\n"


@pytest.mark.skipif(not LINUX_X86, reason="the seccomp filter is x86-64 Linux only")
def test_seccomp_filter_holds_without_the_python_guard(tmp_path: Path) -> None:
    """Load only the kernel filter (no audit hook, no monkeypatching) and try the raw syscalls."""
    keep = tmp_path / "keep.txt"
    keep.write_text("precious")
    script = textwrap.dedent(f"""
        import errno, os, socket, sys, threading
        sys.path.insert(0, {str(Path(sandbox.__file__).parent)!r})
        import sandbox
        assert sandbox._install_seccomp(False)
        def code(call):
            try:
                call()
                return "ok"
            except OSError as e:
                return errno.errorcode[e.errno]
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        print(code(os.fork), code(lambda: os.kill(os.getppid(), 0)), code(socket.socket),
              code(lambda: os.unlink({str(keep)!r})), code(lambda: os.open({str(keep)!r}, os.O_WRONLY)),
              code(lambda: os.open({str(keep)!r}, os.O_RDONLY) and None),
              code(lambda: os.execv("/bin/true", ["true"])))
    """)
    out = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["EPERM", "EPERM", "EPERM", "EPERM", "EPERM", "ok", "EPERM"], out.stderr
    assert keep.read_text() == "precious"


def _run_bpf(prog: list[tuple[int, int, int, int]], nr: int, args: tuple[int, ...] = (),
             arch: int = 0xC000003E) -> int:
    """A tiny classic-BPF interpreter for the subset the filter uses."""
    data = {0: nr, 4: arch}
    for i, a in enumerate(list(args) + [0] * (6 - len(args))):
        data[16 + 8 * i], data[20 + 8 * i] = a & 0xFFFFFFFF, a >> 32
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x06:
            return k
        if code == 0x20:
            acc, pc = data[k], pc + 1
            continue
        taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
        pc += 1 + (jt if taken else jf)


def test_seccomp_program_semantics() -> None:
    prog = seccomp_program(allow_file_writes=False)
    allow, eperm, enosys = 0x7FFF0000, 0x50000 | errno.EPERM, 0x50000 | errno.ENOSYS
    assert len(prog) < 4096 and prog[-1] == (0x06, 0, 0, allow)
    assert _run_bpf(prog, 0) == allow  # read
    assert _run_bpf(prog, 57) == eperm  # fork
    assert _run_bpf(prog, 59) == eperm  # execve
    assert _run_bpf(prog, 41) == eperm  # socket
    assert _run_bpf(prog, 62) == eperm  # kill
    assert _run_bpf(prog, 56, (0x10000 | 0x100,)) == allow  # clone(CLONE_THREAD|CLONE_VM): a thread
    assert _run_bpf(prog, 56, (17,)) == eperm  # clone(SIGCHLD): a fork
    assert _run_bpf(prog, 435) == enosys  # clone3 -> glibc falls back to clone
    assert _run_bpf(prog, 257, (0, 0, os.O_RDONLY)) == allow  # openat read
    assert _run_bpf(prog, 257, (0, 0, os.O_WRONLY | os.O_CREAT)) == eperm
    assert _run_bpf(prog, 302, (0, 7, 0, 1)) == allow  # prlimit64 read-only
    assert _run_bpf(prog, 302, (0, 7, 0x1000, 0)) == eperm  # a new limit (low word set)
    assert _run_bpf(prog, 302, (0, 7, 0x7FFF_0000_0000, 0)) == eperm  # a new limit (high word set)
    assert _run_bpf(prog, 0, arch=0x40000003) == 0x80000000  # i386 ABI: kill the process
    writable = seccomp_program(allow_file_writes=True)
    assert _run_bpf(writable, 257, (0, 0, os.O_WRONLY | os.O_CREAT)) == allow
    assert _run_bpf(writable, 87) == eperm  # unlink stays refused


@pytest.mark.skipif(not (LINUX_X86 and os.geteuid() == 0), reason="needs root on x86-64 Linux")
def test_probe_reports_kernel_layers_active() -> None:
    assert probe_isolation() == {"runs": True, "seccomp": True, "network_namespace": True}
