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
import linecache
import os
import sys
import traceback
import types
from typing import Any

_REPORT_FD = 3


def _streams() -> None:
    """Fresh std streams on fds 0-2 (the server's own objects may hold buffered state)."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8",
                                                 errors="surrogateescape")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                                   errors="surrogateescape")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                                   errors="backslashreplace", line_buffering=True)


def _fresh_main() -> dict[str, Any]:
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__="solution.py", __builtins__=builtins)
    sys.modules["__main__"] = main
    sys.argv = ["solution.py"]
    return main.__dict__


def _print_user_traceback(exc: BaseException) -> None:
    """The user's frames only: drop this file's frames from the top of the traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


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
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


def run_program(source: str) -> int:
    """`python solution.py`, stdin already on fd 0; returns the exit status."""
    _streams()
    try:
        code = _compile(source, "solution.py")
        exec(code, _fresh_main())
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - the program's own error, printed like the interpreter
        _print_user_traceback(exc)
        status = 1
    return _finish(status)


def _run_one(program: types.CodeType, test: dict[str, Any], index: int, root: str) -> tuple[str, str]:
    """Run the program (then the test code) once; (status, reason)."""
    if "stdin" in test:
        fd = os.open(os.path.join(root, f"stdin-{index}"), os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
    _streams()
    limit = sys.getrecursionlimit()
    try:
        namespace = _fresh_main()
        exec(program, namespace)
        if "script" in test:
            exec(_compile(test["script"], f"test_{index}.py"), namespace)
        status, reason = ("pass" if "script" in test else "done"), ""
    except SystemExit as exc:
        ok = "stdin" in test and exc.code in (None, 0)
        status, reason = ("done", "") if ok else ("fail", f"exited ({exc.code}) before the test finished")
    except BaseException as exc:  # noqa: BLE001 - a failing test, scored and reported
        _print_user_traceback(exc)
        status, reason = "fail", f"{type(exc).__name__}: {exc}"[:200]
    finally:
        sys.setrecursionlimit(limit)
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
        _print_user_traceback(exc)
        for index in range(first, len(tests)):
            os.write(_REPORT_FD, f"{nonce} {index} fail -1 {type(exc).__name__}\n".encode())
        return 1
    for index in range(first, len(tests)):
        status, reason = _run_one(program, tests[index], index, root)
        try:
            end = os.fstat(1).st_size  # where this test's output ends (stdout is append-only)
        except OSError:
            end = -1
        os.write(_REPORT_FD, f"{nonce} {index} {status} {end} {reason}".rstrip().encode() + b"\n")
    return 0


def run_request(req: dict[str, Any], root: str, first: int) -> int:
    """The child's entry point after the lockdown; returns its exit status."""
    if req["kind"] == "tests":
        return run_tests(req["source"], req["tests"], req["nonce"], root, first)
    return run_program(req["source"])
