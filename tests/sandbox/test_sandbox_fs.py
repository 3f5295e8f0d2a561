"""The sandbox cannot change the host filesystem: every mutating syscall, refused by the kernel filter.

Each call is made raw (ctypes `syscall(nr, ...)`) in a process holding ONLY the seccomp filter (no
audit hook, no monkeypatching), aimed at real files the test owns, and the host is checked after.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from grpo_cli.rewards import sandbox
from grpo_cli.rewards.sandbox import run_python

LINUX_X86 = sys.platform == "linux" and platform.machine() == "x86_64"
AT_FDCWD = -100
OLD = 1_000_000_000  # a timestamp far in the past: any utime call would move it

# name -> (x86-64 number, args). "K" the kept file, "D" the kept dir, "N" a new path, "F" an fd on K
# opened O_RDWR before the filter, "X" the xattr name, "P" a pointer to an int (0x80: FS_NOATIME_FL).
CALLS: dict[str, tuple[int, list[Any]]] = {
    "mkdir": (83, ["N", 0o755]), "mkdirat": (258, [AT_FDCWD, "N", 0o755]), "rmdir": (84, ["D"]),
    "unlink": (87, ["K"]), "unlinkat": (263, [AT_FDCWD, "K", 0]),
    "rename": (82, ["K", "N"]), "renameat": (264, [AT_FDCWD, "K", AT_FDCWD, "N"]),
    "renameat2": (316, [AT_FDCWD, "K", AT_FDCWD, "N", 0]),
    "link": (86, ["K", "N"]), "linkat": (265, [AT_FDCWD, "K", AT_FDCWD, "N", 0]),
    "symlink": (88, ["K", "N"]), "symlinkat": (266, ["K", AT_FDCWD, "N"]),
    "mknod": (133, ["N", stat.S_IFIFO | 0o644, 0]), "mknodat": (259, [AT_FDCWD, "N", stat.S_IFIFO | 0o644, 0]),
    "chmod": (90, ["K", 0o777]), "fchmod": (91, ["F", 0o777]), "fchmodat": (268, [AT_FDCWD, "K", 0o777]),
    "fchmodat2": (452, [AT_FDCWD, "K", 0o777, 0]),
    "chown": (92, ["K", 4321, 4321]), "fchown": (93, ["F", 4321, 4321]), "lchown": (94, ["K", 4321, 4321]),
    "fchownat": (260, [AT_FDCWD, "K", 4321, 4321, 0]),
    "utime": (132, ["K", 0]), "utimes": (235, ["K", 0]), "futimesat": (261, [AT_FDCWD, "K", 0]),
    "utimensat": (280, [AT_FDCWD, "K", 0, 0]), "futimens": (280, ["F", 0, 0, 0]),
    "truncate": (76, ["K", 0]), "ftruncate": (77, ["F", 0]), "fallocate": (285, ["F", 0, 0, 1 << 20]),
    "setxattr": (188, ["K", "X", "K", 1, 0]), "lsetxattr": (189, ["K", "X", "K", 1, 0]),
    "fsetxattr": (190, ["F", "X", "K", 1, 0]), "removexattr": (197, ["K", "user.keep"]),
    "lremovexattr": (198, ["K", "user.keep"]), "fremovexattr": (199, ["F", "user.keep"]),
    "setxattrat": (463, [AT_FDCWD, "K", 0, "X", 0, 0]), "removexattrat": (466, [AT_FDCWD, "K", 0, "user.keep"]),
    "ioctl FS_IOC_SETFLAGS": (16, ["F", 0x40086602, "P"]),
}


def _host_state(root: Path) -> dict[str, Any]:
    keep = root / "keep.txt"
    st = keep.stat()
    try:
        xattrs = sorted(os.listxattr(keep))
    except OSError:
        xattrs = []
    return {"files": sorted(p.name for p in root.iterdir()), "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid,
            "mtime": int(st.st_mtime), "size": st.st_size, "xattrs": xattrs, "text": keep.read_text(),
            "dir": sorted(p.name for p in (root / "keepdir").iterdir())}


@pytest.fixture(scope="module")
def attempts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Make every call once under the filter only; the errno each got, and the host before/after."""
    root = tmp_path_factory.mktemp("host")
    keep = root / "keep.txt"
    keep.write_text("precious")
    keep.chmod(0o644)
    (root / "keepdir").mkdir()
    with_xattr = True
    try:
        os.setxattr(keep, "user.keep", b"1")
    except OSError:
        with_xattr = False
    os.utime(keep, (OLD, OLD))
    before = _host_state(root)
    script = textwrap.dedent(f"""
        import ctypes, json, os, sys
        sys.path.insert(0, {str(Path(sandbox.__file__).parent)!r})
        import sandbox
        calls = json.loads({json.dumps(json.dumps(CALLS))})
        keep, new = {str(keep).encode()!r}, {str(root / "new").encode()!r}
        fd = os.open(keep, os.O_RDWR)
        flags = ctypes.c_int(0x80)
        assert sandbox._install_seccomp(False)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        subs = {{"K": keep, "D": {str(root / "keepdir").encode()!r}, "N": new, "F": fd, "X": b"user.grpo",
                "P": ctypes.byref(flags)}}
        out = {{}}
        for name, (nr, args) in calls.items():
            real = [subs.get(a, a.encode() if isinstance(a, str) else a) if isinstance(a, str) else a for a in args]
            real = [ctypes.c_long(a) if isinstance(a, int) else a for a in real]
            ctypes.set_errno(0)
            rc = libc.syscall(ctypes.c_long(nr), *real)
            out[name] = "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, timeout=60)
    results = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return {"results": results, "stderr": proc.stderr, "before": before, "after": _host_state(root),
            "with_xattr": with_xattr}


@pytest.mark.skipif(not LINUX_X86, reason="the seccomp filter is x86-64 Linux only")
@pytest.mark.parametrize("call", list(CALLS))
def test_kernel_filter_refuses_filesystem_change(attempts: dict[str, Any], call: str) -> None:
    assert attempts["results"].get(call) == os.strerror(errno.EPERM), attempts["stderr"]


@pytest.mark.skipif(not LINUX_X86, reason="the seccomp filter is x86-64 Linux only")
def test_host_files_unchanged_after_every_call(attempts: dict[str, Any]) -> None:
    assert attempts["after"] == attempts["before"]
    assert attempts["before"]["mtime"] == OLD and attempts["before"]["text"] == "precious"


@pytest.mark.skipif(os.geteuid() != 0, reason="the reproductions were found as root")
def test_issue_reproductions_as_root(tmp_path: Path) -> None:
    """The two holes reported: a host directory created, a host file's timestamps rewritten."""
    target = tmp_path / "pwned_dir"
    host_file = tmp_path / "host.txt"
    host_file.write_text("x")
    os.utime(host_file, (OLD, OLD))
    mkdir = run_python(f"import os\nos.mkdir({str(target)!r})\nprint('made')")
    utime = run_python(f"import os\nos.utime({str(host_file)!r}, (0, 0))\nprint('touched')")
    bypass = run_python(f"import posix\nposix.mkdir({str(target)!r}, 0o755)\nprint('made')")
    assert not target.exists() and int(host_file.stat().st_mtime) == OLD
    assert [r.ok for r in (mkdir, utime, bypass)] == [False, False, False]
    assert "PermissionError" in mkdir.stderr and "PermissionError" in utime.stderr


def _landlock() -> int:
    from grpo_cli.rewards.sandbox_policy import landlock_abi

    return landlock_abi()


@pytest.mark.skipif(not LINUX_X86 or _landlock() < 1, reason="needs Landlock (Linux 5.13+)")
def test_opted_in_file_writes_stay_in_the_working_directory(tmp_path: Path) -> None:
    """`allow_file_writes=True` lets a program write its own files, and nothing outside its directory."""
    host = tmp_path / "host.txt"
    host.write_text("precious")
    code = textwrap.dedent(f"""
        open("mine.txt", "w").write("ok")
        results = [open("mine.txt").read()]
        for path in ({str(host)!r}, {str(tmp_path / "new.txt")!r}):
            try:
                open(path, "w").write("pwned")
                results.append("wrote")
            except OSError as e:
                results.append(type(e).__name__)
        print(results)
    """)
    r = run_python(code, allow_file_writes=True)
    assert r.stdout.strip() == "['ok', 'PermissionError', 'PermissionError']", r.stderr
    assert host.read_text() == "precious" and sorted(p.name for p in tmp_path.iterdir()) == ["host.txt"]
