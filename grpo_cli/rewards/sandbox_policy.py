"""What a sandboxed program may do: the kernel syscall filter and the in-interpreter guard.

Stdlib only, and importable on its own: the fork server (`sandbox_server.py`, run by a bare
`python -I -S -B`) loads it from this directory, outside the `grpo_cli` package.

Filesystem policy. Reading the host filesystem is allowed (the program needs the stdlib); every
call that changes it is refused by the kernel filter, in both modes: no mkdir/rmdir, rename,
unlink, link/symlink, mknod, chmod/chown, utime/utimensat, truncate/ftruncate/fallocate, xattr
changes, or chattr ioctls. The program's writable state is its already-open stdout/stderr. With
`allow_file_writes` it may also open regular files for writing in its empty throwaway working
directory: seccomp sees a pointer, not the path, so the path is confined by Landlock (Linux 5.13+),
which allows writes only beneath that directory; where the kernel has no Landlock, that mode cannot
confine which path is opened, so it is off by default and the `code` reward never turns it on.
"""

from __future__ import annotations

import errno
import os
import pathlib
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

O_WRITE_MASK = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# x86-64 syscall numbers refused with EPERM by the seccomp filter.
BLOCKED_SYSCALLS_X86_64 = {
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
    # Every call that changes the filesystem's names, metadata or sizes.
    "mkdir": 83, "mkdirat": 258, "rmdir": 84,
    "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316,
    "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266, "mknod": 133, "mknodat": 259,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452,
    "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260,
    "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
    "truncate": 76, "ftruncate": 77, "fallocate": 285,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198,
    "fremovexattr": 199, "setxattrat": 463, "removexattrat": 466,
    "setrlimit": 160, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "acct": 163, "quotactl": 179,
    "quotactl_fd": 443, "setpriority": 141, "ioprio_set": 251,
}
# ioctl requests that change a file's attributes (chattr, project ids) through a read-only fd.
BLOCKED_IOCTLS = {"FS_IOC_SETFLAGS": 0x40086602, "FS_IOC32_SETFLAGS": 0x40046602,
                  "FS_IOC_SETVERSION": 0x40087602, "FS_IOC_FSSETXATTR": 0x401C5820}
_NR_CLONE, _NR_CLONE3, _NR_PRLIMIT64, _NR_IOCTL = 56, 435, 302, 16
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
    blocked = list(BLOCKED_SYSCALLS_X86_64.values()) + ([] if allow_file_writes else [_NR_CREAT])
    if allow_file_writes:  # the program may size files it created (ftruncate on its own fds)
        blocked.remove(BLOCKED_SYSCALLS_X86_64["ftruncate"])
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
    # ioctl: everything but the attribute-changing requests (ioctl numbers are 32-bit).
    requests = list(BLOCKED_IOCTLS.values())
    prog += [(_JEQ, 0, 2 * len(requests) + 2, _NR_IOCTL), (_LD_ABS, 0, 0, _arg_offset(1))]
    for req in requests:
        prog += [(_JEQ, 0, 1, req), (_RET, 0, 0, eperm)]
    prog.append((_RET, 0, 0, _ALLOW))
    if not allow_file_writes:
        for nr, arg in ((_NR_OPEN, 1), (_NR_OPENAT, 2)):
            prog += [(_JEQ, 0, 4, nr), (_LD_ABS, 0, 0, _arg_offset(arg)), (_JSET, 0, 1, O_WRITE_MASK),
                     (_RET, 0, 0, eperm), (_RET, 0, 0, _ALLOW)]
    prog.append((_RET, 0, 0, _ALLOW))
    return prog


_PREPARED: dict[Any, Any] = {}


def prepare_seccomp(allow_file_writes: bool) -> Any:
    """Build the filter and the libc handles once (the fork server does this before forking)."""
    if allow_file_writes in _PREPARED:
        return _PREPARED[allow_file_writes]
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
    ulong = ctypes.c_ulong
    _PREPARED[allow_file_writes] = (
        libc.prctl, libc.capset, ctypes.byref(SockFprog(len(rows), table)), table,
        ctypes.byref(CapHeader(0x20080522, 0)), ctypes.byref((CapData * 2)()), ulong(0), ulong(1), ulong(2),
    )
    return _PREPARED[allow_file_writes]


def install_seccomp(allow_file_writes: bool) -> bool:
    """Load the syscall filter into this process and drop capabilities; False where unsupported."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    prctl, capset, fprog, _table, cap_header, cap_data, zero, one, two = prepare_seccomp(allow_file_writes)
    # Drop every capability first (a root child keeps uid 0 but loses its privileges).
    capset(cap_header, cap_data)
    if prctl(38, one, zero, zero, zero) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return bool(prctl(22, two, fprog, zero, zero) == 0)  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def enter_empty_network_namespace() -> bool:
    """unshare(CLONE_NEWNET): a namespace where not even loopback is up; False where not permitted."""
    if sys.platform != "linux":
        return False
    import ctypes

    return bool(ctypes.CDLL(None, use_errno=True).unshare(ctypes.c_int(0x40000000)) == 0)


# Landlock filesystem rights (uapi/linux/landlock.h): every right that creates, writes or removes something.
_LL_WRITE_FILE, _LL_TRUNCATE = 1 << 1, 1 << 14
_LL_WRITES = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write_file, remove_*, make_*
_NR_LL_CREATE, _NR_LL_ADD_RULE, _NR_LL_RESTRICT = 444, 445, 446


def _landlock() -> tuple[int, Any]:
    """(ABI version or 0, libc), resolved once (the fork server does it before forking)."""
    if "landlock" not in _PREPARED:
        abi, libc = 0, None
        if sys.platform == "linux" and platform.machine() == "x86_64":
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            abi = max(0, int(libc.syscall(ctypes.c_long(_NR_LL_CREATE), None, ctypes.c_size_t(0),
                                          ctypes.c_uint32(1))))  # LANDLOCK_CREATE_RULESET_VERSION
        _PREPARED["landlock"] = (abi, libc)
    return _PREPARED["landlock"]  # type: ignore[no-any-return]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (then only seccomp guards writes)."""
    return _landlock()[0]


def restrict_writes_to(workdir: str | None) -> bool:
    """Landlock: no write, create or remove anywhere but beneath `workdir` (None: nowhere) and /dev/null.

    The path-aware layer seccomp cannot be: with `allow_file_writes` a program may write files, but only
    in its throwaway directory. Reading stays allowed. False where the kernel has no Landlock.
    """
    abi, libc = _landlock()
    if abi < 1:
        return False
    import ctypes

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    handled = _LL_WRITES | (1 << 13 if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)  # + refer, truncate
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr, first field only (accepted by every ABI)
    ruleset = int(libc.syscall(ctypes.c_long(_NR_LL_CREATE), ctypes.byref(attr), ctypes.c_size_t(8),
                               ctypes.c_uint32(0)))
    if ruleset < 0:
        return False
    try:
        rules = [("/dev/null", _LL_WRITE_FILE | (_LL_TRUNCATE if abi >= 3 else 0))]
        rules += [(workdir, handled)] if workdir else []
        for path, allowed in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = PathBeneath(allowed, fd)
                libc.syscall(ctypes.c_long(_NR_LL_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(1),
                             ctypes.byref(rule), ctypes.c_uint32(0))  # LANDLOCK_RULE_PATH_BENEATH
            finally:
                os.close(fd)
        libc.prctl(38, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))  # NO_NEW_PRIVS
        return bool(libc.syscall(ctypes.c_long(_NR_LL_RESTRICT), ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0)
    finally:
        os.close(ruleset)


def set_parent_death_signal(prepare_only: bool = False) -> None:
    """SIGKILL this process when the thread that forked it dies (Linux), so no child outlives its server."""
    if sys.platform != "linux":
        return
    import ctypes
    import signal

    if "pdeathsig" not in _PREPARED:  # resolved once in the server, not in every child
        _PREPARED["pdeathsig"] = (ctypes.CDLL(None).prctl, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0))
    prctl, sigkill, zero = _PREPARED["pdeathsig"]
    if not prepare_only:
        prctl(1, sigkill, zero, zero, zero)  # PR_SET_PDEATHSIG


def signal_name(rc: int) -> str | None:
    """The name of the signal that ended a sandboxed program (return code -N), as both sides report it."""
    import signal

    try:
        return signal.Signals(-rc).name
    except ValueError:
        return None


def nproc_limit() -> int:
    """RLIMIT_NPROC counts every task of the user: allow what exists now plus a few threads.

    Root is exempt from RLIMIT_NPROC; there the seccomp filter and the audit hook stop forks.
    """
    import resource

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
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    limit = tasks + 16
    return limit if hard == resource.RLIM_INFINITY or os.geteuid() == 0 else min(limit, hard)


AUDIT_BLOCKED = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chdir", "os.chmod", "os.chown", "os.link",
    "os.symlink", "os.setxattr", "os.removexattr", "os.startfile", "os.mkdir", "os.utime", "os.chflags",
    "subprocess.Popen", "pty.spawn",
    "shutil.rmtree", "shutil.move", "shutil.chown", "socket.__new__", "socket.connect", "socket.bind",
    "socket.sendto", "socket.getaddrinfo", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "sys.addaudithook",
    "resource.setrlimit", "resource.prlimit",
})
# Frames and the garbage collector's object lists lead up to the runner's own variables (the report nonce,
# the request, the test sources): a program may not reach any frame or walk the heap. ValueError is what the
# stdlib (logging, typing, enum, namedtuple) already expects from `sys._getframe` on interpreters without it.
FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
                          "gc.get_referents", "sys.settrace", "sys.setprofile"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# /proc/*/mem (any pid, task or directory fd) and /dev/mem, /dev/kmem: a process's own memory holds the nonce.
MEMORY_FILES = frozenset({"mem", "kmem"})
BLOCKED_MODULES = ("ctypes", "_ctypes", "multiprocessing", "_multiprocessing", "_posixsubprocess",
                   "_posixshmem", "pty", "resource", "concurrent.futures.process")
_OS_BLOCKED = (
    "fork", "forkpty", "system", "popen", "kill", "killpg", "setsid", "setpgid", "setpgrp", "setuid",
    "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid", "nice", "plock",
    "remove", "unlink", "rmdir", "removedirs", "rename", "renames", "replace", "truncate", "ftruncate",
    "chdir", "fchdir", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "chroot", "link",
    "symlink", "mkfifo", "mknod", "mkdir", "makedirs", "utime", "chflags", "lchflags", "posix_fallocate",
    "posix_spawn", "posix_spawnp", "register_at_fork",
    "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
    "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe",
)


def _refuse(name: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"{name} is disabled in the grpo sandbox")

    refused.__name__ = name.rsplit(".", 1)[-1]
    return refused


def guard_patches() -> list[tuple[Any, str, Callable[..., Any]]]:
    """(module, name, refusing function) for every patched name; built once (in the fork server)."""
    if "patches" not in _PREPARED:
        import posix
        import socket

        names = [(m, n, f"os.{n}") for m in (os, posix) for n in _OS_BLOCKED if hasattr(m, n)]
        names += [(shutil, n, f"shutil.{n}") for n in ("rmtree", "move", "chown", "copystat", "copymode")]
        names += [(subprocess, n, f"subprocess.{n}") for n in ("Popen", "run", "call", "check_call", "check_output",
                                                                "getoutput", "getstatusoutput")]
        names += [(socket, n, f"socket.{n}") for n in ("socket", "socketpair", "create_connection", "create_server",
                                                       "fromfd", "getaddrinfo")]
        _PREPARED["patches"] = [(m, n, _refuse(label)) for m, n, label in names]
    return _PREPARED["patches"]  # type: ignore[no-any-return]


def _frameless(handler: Any) -> Any:
    """A signal handler that is given no frame: the interrupted frame's `f_back` leads up to the runner."""
    if not callable(handler):
        return handler

    def on_signal(signum: int, frame: Any) -> Any:
        return handler(signum, None)

    return on_signal


def _signal_via_hook(signalnum: Any, handler: Any, /) -> Any:
    """`_signal.signal` in the child: the real one lives only in the audit hook, out of the program's reach."""
    box: list[Any] = []
    sys.audit("grpo.sandbox.signal", signalnum, handler, box)
    return box[0] if box else None


def install_python_guard(allow_file_writes: bool) -> None:
    """Human-eval style guard plus an audit hook; the hook holds even if the patches are undone.

    The hook only reads its own locals: this module's globals are reachable from the program (through
    any patched function's `__globals__`), so a program could otherwise empty the lists it checks.
    """
    import _signal
    import builtins

    real_signal, frameless = _signal.signal, _frameless
    blocked_imports, blocked, frame_events = frozenset(BLOCKED_MODULES), AUDIT_BLOCKED, FRAME_EVENTS
    frame_attributes, write_mask, memory_files, fsdecode = FRAME_ATTRIBUTES, O_WRITE_MASK, MEMORY_FILES, os.fsdecode
    plain_paths, path_like = (str, bytes, pathlib.PosixPath, pathlib.PurePosixPath), os.PathLike

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "grpo.sandbox.signal" and len(args) == 3 and isinstance(args[2], list):
            args[2].append(real_signal(args[0], frameless(args[1])))
            return
        if event in blocked:
            raise PermissionError(f"{event} is disabled in the grpo sandbox")
        if event in frame_events:
            raise ValueError(f"{event} is disabled in the grpo sandbox")
        if event == "object.__getattr__" and len(args) == 2 and args[1] in frame_attributes:
            raise AttributeError(f"{args[1]} is disabled in the grpo sandbox")
        if event == "import" and args and args[0] in blocked_imports:
            raise ImportError(f"import of {args[0]} is disabled in the grpo sandbox")
        if event == "open" and args and isinstance(args[0], path_like | str | bytes):
            if type(args[0]) not in plain_paths:  # its own __fspath__ could name another file at the real open
                raise PermissionError("only str, bytes and pathlib paths can be opened in the grpo sandbox")
            if fsdecode(args[0]).rstrip("/").rsplit("/", 1)[-1] in memory_files:
                raise PermissionError(f"reading process memory is disabled in the grpo sandbox: {args[0]!r}")
        # An int path wraps a descriptor the process already has: that grants nothing new.
        if event == "open" and not allow_file_writes and len(args) >= 3 and not isinstance(args[0], int):
            mode, flags = args[1], args[2]
            writing = (isinstance(flags, int) and flags & write_mask) or (
                isinstance(mode, str) and any(c in mode for c in "wxa+"))
            if writing:
                raise PermissionError(f"writing files is disabled in the grpo sandbox: {args[0]!r}")

    for module, name, refused in guard_patches():
        setattr(module, name, refused)
    for name in BLOCKED_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]
    builtins.help = None  # type: ignore[assignment]  # pydoc can spawn a pager
    sys.addaudithook(hook)
    _signal.signal = _signal_via_hook
