"""Inside the sandboxed child, after the lockdown: run the program (and its tests) as `__main__`.

Imported by the fork server from this directory (stdlib only). For `run` requests it behaves like
`python solution.py`: a traceback without this file's frames, exit status from SystemExit, atexit
handlers and non-daemon threads honoured. For `tests` requests it runs each test in a fresh
`__main__` namespace and reports `NONCE INDEX STATUS STDOUT_END [REASON]` lines on fd 3:
* assert-style test (`script`): `pass` when the program and the test code ran to the end; any
  exception or SystemExit (an `exit(0)` before the asserts) is a `fail`.
* stdin/stdout case (`stdin`): fd 0 is that case's input; `done` when the program ended normally
  (the server slices its stdout and the parent compares it; the expected output never enters here).
"""

from __future__ import annotations

import builtins
import io
import os
import sys
import types
from typing import Any

# The program runs in this process after these lines, and may replace anything it can reach: `builtins.exec`,
# `os.write`, `sys.__excepthook__`... The runner therefore looks up its builtins in a private copy taken now
# (functions defined below resolve builtins through this module's `__builtins__`), keeps its own references to
# what it calls, and leaves `sys.modules` (see `run_request`), so the program cannot reach this module's globals.
__builtins__ = dict(builtins.__dict__)  # type: ignore[assignment]  # noqa: A001
_exec, _compile_code, _excepthook = exec, compile, sys.__excepthook__
_write, _fstat, _open, _dup2, _close, _O_RDONLY = os.write, os.fstat, os.open, os.dup2, os.close, os.O_RDONLY
_TextIOWrapper, _FileIO, _ModuleType = io.TextIOWrapper, io.FileIO, types.ModuleType
_getrecursionlimit, _setrecursionlimit, _modules = sys.getrecursionlimit, sys.setrecursionlimit, sys.modules
_BUILTINS_DICT = builtins.__dict__
_BUILTINS_SNAPSHOT: dict[str, Any] = {}  # filled in the child, after the guard has run

_REPORT_FD = 3


def _restore_builtins() -> None:
    """The builtins as they were before the program ran (a program may replace `builtins.exec`, `len`...)."""
    _BUILTINS_DICT.clear()
    _BUILTINS_DICT.update(_BUILTINS_SNAPSHOT)


def _streams() -> None:
    """Fresh std streams on fds 0-2 (the server's own objects may hold buffered state)."""
    sys.stdin = sys.__stdin__ = _TextIOWrapper(_FileIO(0, "r", closefd=False), encoding="utf-8",  # type: ignore[misc]
                                               errors="surrogateescape")
    sys.stdout = sys.__stdout__ = _TextIOWrapper(_FileIO(1, "w", closefd=False), encoding="utf-8",  # type: ignore[misc]
                                                 errors="surrogateescape")
    sys.stderr = sys.__stderr__ = _TextIOWrapper(_FileIO(2, "w", closefd=False), encoding="utf-8",  # type: ignore[misc]
                                                 errors="backslashreplace", line_buffering=True)


def _fresh_main() -> dict[str, Any]:
    main = _ModuleType("__main__")
    main.__dict__.update(__file__="solution.py", __builtins__=builtins)
    _modules["__main__"] = main
    sys.argv = ["solution.py"]
    return main.__dict__


def _print_user_traceback(exc: BaseException, skip: int) -> None:
    """The interpreter's own display, less this file's `skip` frames at the top of the traceback.

    It reads frames in C: the Python `traceback` module needs `tb_frame`, which the guard refuses to programs.
    No source lines are shown: sources are kept out of `linecache` (the program could read the tests there).
    """
    tb = exc.__traceback__
    while skip > 0 and tb is not None:  # skip may exceed the depth (all frames are ours)
        tb, skip = tb.tb_next, skip - 1
    BaseException.with_traceback(exc, tb)
    _excepthook(type(exc), exc, tb)


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _finish(status: int) -> int:
    """What the interpreter does at exit: atexit handlers, non-daemon threads, flush."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - as the interpreter: exit handlers cannot change the status
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            status = status or 120
    return status


def _compile(source: str, filename: str) -> types.CodeType:
    """Not cached in `linecache`: a program could read the tests, or the sentinel after its own source."""
    return _compile_code(source, filename, "exec")  # type: ignore[no-any-return]


def run_program(source: str) -> int:
    """`python solution.py`, stdin already on fd 0; returns the exit status."""
    _streams()
    try:
        code = _compile(source, "solution.py")
    except BaseException as exc:  # noqa: BLE001 - a syntax error, printed like the interpreter
        _print_user_traceback(exc, skip=1 << 30)
        return _finish(1)
    try:
        _exec(code, _fresh_main())
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - the program's own error, printed like the interpreter
        _print_user_traceback(exc, skip=1)
        status = 1
    return _finish(status)


def _run_one(program: types.CodeType, test: dict[str, Any], index: int, root: str) -> tuple[str, str]:
    """Run the program (then the test code) once; (status, reason)."""
    if "stdin" in test:
        fd = _open(f"{root}/stdin-{index}", _O_RDONLY)
        _dup2(fd, 0)
        _close(fd)
    _restore_builtins()
    _streams()
    limit = _getrecursionlimit()
    try:
        namespace = _fresh_main()
        _exec(program, namespace)
        if "script" in test:
            _exec(_compile(test["script"], f"test_{index}.py"), namespace)
        status, reason = ("pass" if "script" in test else "done"), ""
    except SystemExit as exc:
        ok = "stdin" in test and exc.code in (None, 0)
        status, reason = ("done", "") if ok else ("fail", f"exited ({exc.code}) before the test finished")
    except BaseException as exc:  # noqa: BLE001 - a failing test, scored and reported
        _print_user_traceback(exc, skip=1)
        status, reason = "fail", f"{type(exc).__name__}: {exc}"[:200]
    finally:
        _setrecursionlimit(limit)
        _restore_builtins()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException as exc:  # noqa: BLE001
        status, reason = "fail", f"output could not be written: {type(exc).__name__}"
    return status, " ".join(reason.split())


def run_tests(source: str, tests: list[dict[str, Any]], nonce: str, root: str, first: int) -> int:
    """Run tests[first:] in sequence, reporting each on fd 3."""
    try:
        program = _compile(source, "solution.py")
    except BaseException as exc:  # noqa: BLE001 - a syntax error fails every test, in one child
        _streams()
        _print_user_traceback(exc, skip=1 << 30)
        for index in range(first, len(tests)):
            _write(_REPORT_FD, f"{nonce} {index} fail -1 {type(exc).__name__}\n".encode())
        return 1
    for index in range(first, len(tests)):
        status, reason = _run_one(program, tests[index], index, root)
        try:
            end = _fstat(1).st_size  # where this test's output ends (stdout is append-only)
        except OSError:
            end = -1
        _write(_REPORT_FD, f"{nonce} {index} {status} {end} {reason}".rstrip().encode() + b"\n")
    return 0


def run_request(req: dict[str, Any], root: str, first: int) -> int:
    """The child's entry point after the lockdown; returns its exit status.

    This module and the policy leave `sys.modules` first: with frames and the heap refused by the guard,
    nothing the program can reach leads back to the runner's variables (the report nonce among them).
    """
    _BUILTINS_SNAPSHOT.update(_BUILTINS_DICT)
    for name in ("sandbox_runner", "sandbox_policy"):
        _modules.pop(name, None)
    if req["kind"] == "tests":
        return run_tests(req["source"], req["tests"], req["nonce"], root, first)
    return run_program(req["source"])
