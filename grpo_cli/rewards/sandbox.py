"""Run untrusted, model-written Python in a throwaway, resource-limited subprocess.

GRPO code rewards execute whatever the policy wrote, thousands of times per run, often as
root on a GPU box. One call of `run_python` is one fresh interpreter, defended in layers so
that no single bypass is enough:

* process: `python -I -S -B` (no site-packages, no env vars, no cwd on sys.path, no .pyc
  writes) in a new session, in a fresh temporary directory deleted afterwards, with a
  scrubbed environment; the whole process group is SIGKILLed when it ends or times out.
* rlimits (set in `preexec_fn`): address space, CPU time, file size (which also caps
  output), open files, processes, no core dumps.
* network: a fresh, empty network namespace when the kernel allows it (root).
* kernel syscall filter (seccomp-bpf, Linux x86-64): no fork/exec/kill/socket/ptrace/mount,
  no unlink/rename/chmod, no opening files for writing, no raising rlimits; capabilities dropped.
* in the interpreter: a PEP 578 audit hook (cannot be removed once added) refusing the same
  operations and imports of ctypes/multiprocessing, plus human-eval style monkeypatching
  of `os`, `shutil`, `subprocess` and `socket` so the refusal comes with a clear message.

This file doubles as the child's entry point: the child runs it as a script
(`python -I -S -B sandbox.py SOLUTION ALLOW_WRITES`), so it must import only the stdlib.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SandboxResult", "probe_isolation", "run_python"]

_THIS_FILE = os.path.abspath(__file__)
_CLONE_NEWNET = 0x40000000
_O_WRITE_MASK = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


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


# --------------------------------------------------------------------------- parent side


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
) -> SandboxResult:
    """Run `code` as `__main__` with `stdin`, in isolation; never raises for what the code does.

    `timeout` is wall-clock seconds; `cpu_seconds` defaults to ceil(timeout) + 1. Output past
    `max_output_bytes` (per stream) stops the program (`killed_reason="output_limit"`).
    `allow_file_writes=True` lets the program create files (still size-capped); by default
    every open-for-writing fails, which keeps host files safe even when running as root.
    """
    start = time.monotonic()
    cpu = cpu_seconds if cpu_seconds is not None else math.ceil(timeout) + 1
    fsize = max_output_bytes + 1
    root = tempfile.mkdtemp(prefix="grpo-sandbox-")
    try:
        workdir = os.path.join(root, "work")
        os.mkdir(workdir, 0o700)
        solution = os.path.join(root, "solution.py")
        with open(solution, "w", encoding="utf-8", errors="replace") as f:
            f.write(code)
        with open(os.path.join(root, "stdin"), "wb") as f:
            f.write(stdin.encode("utf-8", errors="replace"))
        limits = [
            (resource.RLIMIT_AS, memory_mb * 1024 * 1024, memory_mb * 1024 * 1024),
            (resource.RLIMIT_CPU, max(1, cpu), max(1, cpu) + 1),
            (resource.RLIMIT_FSIZE, fsize, fsize),
            (resource.RLIMIT_NOFILE, 64, 64),
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_NPROC, *([_nproc_limit()] * 2)),
        ]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "HOME": workdir, "TMPDIR": workdir}
        cmd = [sys.executable, "-I", "-S", "-B", _THIS_FILE, solution, "1" if allow_file_writes else "0"]
        out_path, err_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
        with (
            open(os.path.join(root, "stdin"), "rb") as fin,
            open(out_path, "wb") as fout,
            open(err_path, "wb") as ferr,
        ):
            try:
                proc = subprocess.Popen(
                    cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=workdir, env=env, close_fds=True,
                    start_new_session=True, preexec_fn=_make_preexec(limits, isolate_network),
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return SandboxResult(-1, "", f"sandbox could not start: {exc}", False, "spawn_failed",
                                     time.monotonic() - start)
            timed_out = _wait_then_kill_group(proc, start + timeout)
        duration = time.monotonic() - start
        stdout, out_cut = _read_capped(out_path, max_output_bytes)
        stderr, err_cut = _read_capped(err_path, max_output_bytes)
        rc = proc.returncode
        reason = _killed_reason(rc, timed_out, out_cut or err_cut, stderr)
        return SandboxResult(rc, stdout, stderr, timed_out, reason, duration, out_cut or err_cut)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def probe_isolation() -> dict[str, bool]:
    """Which defence layers are active on this machine (for `grpo doctor`-style reports and tests)."""
    probe = (
        "import os\n"
        "status = open('/proc/self/status').read() if os.path.exists('/proc/self/status') else ''\n"
        "seccomp = any(l.split()[1:] == ['2'] for l in status.splitlines() if l.startswith('Seccomp:'))\n"
        "ns = os.readlink('/proc/self/ns/net') if os.path.exists('/proc/self/ns/net') else ''\n"
        "print(int(seccomp), ns)\n"
    )
    result = run_python(probe, timeout=10.0)
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


def _make_preexec(limits: list[tuple[int, int, int]], isolate_network: bool) -> Callable[[], None]:
    """Build the child's pre-exec hook; everything it needs is resolved here, in the parent."""
    unshare = _unshare_function() if isolate_network and os.geteuid() == 0 else None

    def preexec() -> None:
        if unshare is not None:
            with contextlib.suppress(OSError):
                unshare(_CLONE_NEWNET)  # an empty net namespace: not even loopback is up
        for res, soft, hard in limits:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(res, (soft, hard))

    return preexec


def _unshare_function() -> Callable[[int], None] | None:
    """`os.unshare` (Python 3.12+) or the same call through libc; None when unavailable."""
    if hasattr(os, "unshare"):
        return os.unshare  # type: ignore[no-any-return]
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        libc_unshare = ctypes.CDLL(None, use_errno=True).unshare
    except (OSError, AttributeError):
        return None

    def unshare(flags: int) -> None:
        if libc_unshare(ctypes.c_int(flags)) != 0:
            raise OSError(ctypes.get_errno(), "unshare failed")

    return unshare


_NPROC_CACHE: tuple[float, int] = (0.0, 0)


def _nproc_limit() -> int:
    """RLIMIT_NPROC counts every task of the user, so allow what exists now plus a few threads.

    Root is exempt from RLIMIT_NPROC; there the seccomp filter and the audit hook stop forks.
    """
    global _NPROC_CACHE
    now = time.monotonic()
    if now - _NPROC_CACHE[0] > 2.0:
        uid, tasks = os.getuid(), 0
        try:
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        st = os.stat(f"/proc/{pid}/task")
                    except OSError:
                        continue
                    if st.st_uid == uid:
                        tasks += max(1, st.st_nlink - 2)
        except OSError:
            tasks = 4096
        _NPROC_CACHE = (now, tasks)
    limit = _NPROC_CACHE[1] + 16
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    return limit if hard == resource.RLIM_INFINITY or os.geteuid() == 0 else min(limit, hard)


def _wait_then_kill_group(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for exit or the deadline, then SIGKILL the whole group before reaping (no pid reuse race)."""
    delay, timed_out = 0.001, False
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return timed_out


def _read_capped(path: str, limit: int) -> tuple[str, bool]:
    """The first `limit` bytes of a file as text, and whether there was more."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


def _killed_reason(rc: int, timed_out: bool, truncated: bool, stderr: str) -> str | None:
    if timed_out:
        return "timeout"
    if truncated:
        return "output_limit"
    if rc == -signal.SIGXCPU:
        return "cpu_limit"
    if rc < 0:
        try:
            return f"signal:{signal.Signals(-rc).name}"
        except ValueError:
            return f"signal:{-rc}"
    if rc != 0 and "MemoryError" in stderr[-2000:]:
        return "memory_limit"
    return None


# --------------------------------------------------------------------------- child side

# x86-64 syscall numbers refused with EPERM by the seccomp filter.
_BLOCKED_SYSCALLS_X86_64 = {
    "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "socket": 41, "socketpair": 53,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442,
    "reboot": 169, "swapon": 167, "swapoff": 168, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
    "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "name_to_handle_at": 303, "open_by_handle_at": 304,
    "unlink": 87, "unlinkat": 263, "rmdir": 84, "rename": 82, "renameat": 264, "renameat2": 316,
    "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452,
    "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "truncate": 76, "mknod": 133, "mknodat": 259,
    "setrlimit": 160, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "acct": 163, "quotactl": 179,
    "setpriority": 141, "ioprio_set": 251,
}
_NR_CLONE, _NR_CLONE3, _NR_PRLIMIT64 = 56, 435, 302
_NR_OPEN, _NR_OPENAT, _NR_OPENAT2, _NR_CREAT = 2, 257, 437, 85
_CLONE_THREAD = 0x00010000
_AUDIT_ARCH_X86_64 = 0xC000003E
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000


def _arg_offset(i: int) -> int:
    """Offset of the low 32 bits of syscall argument `i` in struct seccomp_data (little endian)."""
    return 16 + 8 * i


def seccomp_program(allow_file_writes: bool) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter as (code, jt, jf, k) rows; pure, so it is unit-testable."""
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    prog = [
        (_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH_X86_64), (_RET, 0, 0, _KILL_PROCESS),
        (_LD_ABS, 0, 0, 0), (_JGE, 0, 1, 0x40000000), (_RET, 0, 0, eperm),  # no x32 ABI
    ]
    blocked = list(_BLOCKED_SYSCALLS_X86_64.values()) + ([] if allow_file_writes else [_NR_CREAT])
    for nr in blocked:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, eperm)]
    # glibc falls back to clone() when clone3() is ENOSYS; openat2's flags hide behind a pointer.
    for nr in [_NR_CLONE3] + ([] if allow_file_writes else [_NR_OPENAT2]):
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, enosys)]
    # clone: threads only.
    prog += [(_JEQ, 0, 4, _NR_CLONE), (_LD_ABS, 0, 0, _arg_offset(0)), (_JSET, 0, 1, _CLONE_THREAD),
             (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eperm)]
    # prlimit64: reading limits (new_limit == NULL) only.
    prog += [(_JEQ, 0, 6, _NR_PRLIMIT64), (_LD_ABS, 0, 0, _arg_offset(2)), (_JEQ, 0, 2, 0),
             (_LD_ABS, 0, 0, _arg_offset(2) + 4), (_JEQ, 1, 0, 0), (_RET, 0, 0, eperm), (_RET, 0, 0, _ALLOW)]
    if not allow_file_writes:
        for nr, arg in ((_NR_OPEN, 1), (_NR_OPENAT, 2)):
            prog += [(_JEQ, 0, 4, nr), (_LD_ABS, 0, 0, _arg_offset(arg)), (_JSET, 0, 1, _O_WRITE_MASK),
                     (_RET, 0, 0, eperm), (_RET, 0, 0, _ALLOW)]
    prog.append((_RET, 0, 0, _ALLOW))
    return prog


def _install_seccomp(allow_file_writes: bool) -> bool:
    """Load the syscall filter into this process and drop capabilities; False where unsupported."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    class CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    rows = seccomp_program(allow_file_writes)
    table = (SockFilter * len(rows))(*[SockFilter(*row) for row in rows])
    fprog = SockFprog(len(rows), table)
    ulong = ctypes.c_ulong
    # Drop every capability first (a root child keeps uid 0 but loses its privileges).
    libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), ctypes.byref((CapData * 2)()))
    if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return bool(libc.prctl(22, ulong(2), ctypes.byref(fprog), ulong(0), ulong(0)) == 0)


_AUDIT_BLOCKED = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chdir", "os.chmod", "os.chown", "os.link",
    "os.symlink", "os.setxattr", "os.removexattr", "os.startfile", "subprocess.Popen", "pty.spawn",
    "shutil.rmtree", "shutil.move", "shutil.chown", "socket.__new__", "socket.connect", "socket.bind",
    "socket.sendto", "socket.getaddrinfo", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "sys.addaudithook",
    "resource.setrlimit", "resource.prlimit",
})
_BLOCKED_MODULES = ("ctypes", "_ctypes", "multiprocessing", "_multiprocessing", "_posixsubprocess",
                    "_posixshmem", "pty", "resource", "concurrent.futures.process")
_OS_BLOCKED = (
    "fork", "forkpty", "system", "popen", "kill", "killpg", "setsid", "setpgid", "setpgrp", "setuid",
    "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid", "nice", "plock",
    "remove", "unlink", "rmdir", "removedirs", "rename", "renames", "replace", "truncate", "ftruncate",
    "chdir", "fchdir", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "chroot", "link",
    "symlink", "mkfifo", "mknod", "posix_spawn", "posix_spawnp", "register_at_fork",
    "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
    "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe",
)


def _refuse(name: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"{name} is disabled in the grpo sandbox")

    refused.__name__ = name.rsplit(".", 1)[-1]
    return refused


def _install_python_guard(allow_file_writes: bool) -> None:
    """Human-eval style guard plus an audit hook; the hook holds even if the patches are undone."""
    import builtins
    import posix
    import socket

    blocked_imports = frozenset(_BLOCKED_MODULES)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in _AUDIT_BLOCKED:
            raise PermissionError(f"{event} is disabled in the grpo sandbox")
        if event == "import" and args and args[0] in blocked_imports:
            raise ImportError(f"import of {args[0]} is disabled in the grpo sandbox")
        if event == "open" and not allow_file_writes and len(args) >= 3:
            mode, flags = args[1], args[2]
            writing = (isinstance(flags, int) and flags & _O_WRITE_MASK) or (
                isinstance(mode, str) and any(c in mode for c in "wxa+"))
            if writing:
                raise PermissionError(f"writing files is disabled in the grpo sandbox: {args[0]!r}")

    for module in (os, posix):
        for name in _OS_BLOCKED:
            if hasattr(module, name):
                setattr(module, name, _refuse(f"os.{name}"))
    for name in ("rmtree", "move", "chown"):
        setattr(shutil, name, _refuse(f"shutil.{name}"))
    for name in ("Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"):
        setattr(subprocess, name, _refuse(f"subprocess.{name}"))
    for name in ("socket", "socketpair", "create_connection", "create_server", "fromfd", "getaddrinfo"):
        setattr(socket, name, _refuse(f"socket.{name}"))
    for name in _BLOCKED_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]
    builtins.help = None  # type: ignore[assignment]  # pydoc can spawn a pager
    sys.addaudithook(hook)


def _child_main(argv: list[str]) -> None:
    """Entry point inside the sandbox: read the solution, lock the process down, run it."""
    import linecache
    import types

    solution_path, allow_file_writes = argv[1], argv[2] == "1"
    with open(solution_path, encoding="utf-8", errors="replace") as f:
        source = f.read()
    linecache.cache["solution.py"] = (len(source), None, source.splitlines(True), "solution.py")
    _install_seccomp(allow_file_writes)
    _install_python_guard(allow_file_writes)
    main = types.ModuleType("__main__")
    main.__dict__["__file__"] = "solution.py"
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    sys.argv = ["solution.py"]
    try:
        exec(compile(source, "solution.py", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:  # print the user's traceback without this file's frame
        import traceback

        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        traceback.print_exception(type(exc), exc, tb)
        sys.exit(1)


if __name__ == "__main__":
    _child_main(sys.argv)
