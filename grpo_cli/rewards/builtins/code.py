"""The `code` reward: run the completion's last ```python block against the row's tests, sandboxed."""

from __future__ import annotations

import functools
import json
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grpo_cli.rewards.builtins.answers import completion_text

_FENCE = re.compile(r"```(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CodeTest:
    """Either test code to run after the solution (`script`), or an stdin -> expected stdout pair."""

    script: str | None = None
    stdin: str = ""
    expected: str | None = None


def extract_code(text: str) -> str | None:
    """The last fenced ```python (or ```py) block, or None when there is none."""
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else None


def parse_tests(tests: Any) -> list[CodeTest] | None:
    """Normalise a `tests` cell; None when the row has no usable tests.

    Accepts a list of assert strings, one string of test code, a list of {"input", "output"}
    dicts, APPS-style {"inputs": [...], "outputs": [...]} (with "fn_name": calls of that function or
    `Solution` method), open-r1's {"test_cases": [...]},
    or any of these JSON-encoded (or written as a Python literal) in a string. A string that is
    a list or dict literal is data, never run as a script.
    """
    if tests is None:
        return None
    if isinstance(tests, str):
        text = tests.strip()
        if not text:
            return None
        if text[0] in "[{":
            structure = _literal(text)
            if structure is not None:  # a literal is data, never a test script (it would pass any program)
                return parse_tests(structure)
        return [CodeTest(script=text)]
    if isinstance(tests, Mapping):
        if "test_cases" in tests:
            return parse_tests(tests["test_cases"])
        if tests.get("fn_name") and isinstance(tests.get("inputs"), list) and isinstance(tests.get("outputs"), list):
            return _call_tests(str(tests["fn_name"]), tests["inputs"], tests["outputs"]) or None
        if isinstance(tests.get("inputs"), list) and isinstance(tests.get("outputs"), list):
            pairs = zip(tests["inputs"], tests["outputs"], strict=False)
            return parse_tests([{"input": i, "output": o} for i, o in pairs])
        if "input" in tests and "output" in tests:
            return [CodeTest(stdin=_as_text(tests["input"]), expected=_as_text(tests["output"]))]
        return None
    if isinstance(tests, Sequence):
        parsed: list[CodeTest] = []
        for item in tests:
            if isinstance(item, str) and item.strip():
                parsed.append(CodeTest(script=item))
            elif isinstance(item, Mapping) and "input" in item and "output" in item:
                parsed.append(CodeTest(stdin=_as_text(item["input"]), expected=_as_text(item["output"])))
        return parsed or None
    return None


# APPS/TACO call-based tests: call the named function (or a LeetCode-style `Solution` method) with each input's
# arguments; an expected value may come wrapped in a one-item list, as those datasets write it.
_CALL = """
_fn = globals().get({name!r})
if _fn is None and "Solution" in globals():
    _fn = getattr(Solution(), {name!r})
_got = _fn(*{args!r})
_want = {want!r}
if isinstance(_got, tuple):
    _got = list(_got)
assert _got == _want or (isinstance(_want, list) and len(_want) == 1 and _got == _want[0]), (_got, _want)
"""


def _call_tests(name: str, inputs: list[Any], outputs: list[Any]) -> list[CodeTest]:
    tests = []
    for args, want in zip(inputs, outputs, strict=False):
        args = list(args) if isinstance(args, list | tuple) else [args]
        tests.append(CodeTest(script=_CALL.format(name=name, args=args, want=want)))
    return tests


def _literal(text: str) -> Any:
    """A JSON (or Python-literal, e.g. a structure written out with str()) list or dict; None when it is not one."""
    import ast

    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, list | dict):
            return value
    return None


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def _same_output(actual: str, expected: str) -> bool:
    """Judge-style comparison: ignore trailing whitespace on each line and trailing blank lines."""
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip().splitlines()]

    return norm(actual) == norm(expected)


def _output_cap(expected: str) -> int:
    return max(65536, 2 * len(expected.encode()) + 1024)


def run_test(program: str, test: CodeTest, *, timeout: float, memory_mb: int) -> bool:
    """Whether one test passes, in a process of its own; any failure of the sandbox fails the test.

    The per-test path (one program per test, as the remote backends run it); `score_program` is
    what the reward uses locally.
    """
    from grpo_cli.rewards.sandbox import run_python

    try:
        if test.script is not None:
            # The sentinel proves the tests ran to the end: `exit(0)` before them must not pass.
            sentinel = f"grpo-tests-passed-{secrets.token_hex(8)}"
            source = f"{program}\n\n{test.script}\n\nprint({sentinel!r})\n"
            result = run_python(source, timeout=timeout, memory_mb=memory_mb)
            return result.ok and result.stdout.rstrip().endswith(sentinel)
        expected = test.expected or ""
        result = run_python(program, test.stdin, timeout=timeout, memory_mb=memory_mb,
                            max_output_bytes=_output_cap(expected))
        return result.ok and _same_output(result.stdout, expected)
    except Exception as exc:  # an unexpected sandbox error fails the test, never the step
        _log.warning("code reward: sandbox error: %s", exc)
        return False


def score_program(program: str, tests: list[CodeTest], *, timeout: float, memory_mb: int) -> tuple[float, str]:
    """(fraction passed, what happened) for one completion: all its tests in ONE sandboxed process."""
    from grpo_cli.rewards.sandbox import run_tests

    specs = [{"script": t.script} if t.script is not None else {"stdin": t.stdin, "cap": _output_cap(t.expected or "")}
             for t in tests]
    result = run_tests(program, specs, timeout=timeout, memory_mb=memory_mb)
    if result.error:
        _log.warning("code reward: %s", result.error)
        return 0.0, result.error
    passed, first_failure = 0, ""
    for i, (test, outcome) in enumerate(zip(tests, result.outcomes, strict=True)):
        ok = outcome.passed if test.script is not None else (
            outcome.stdout is not None and _same_output(outcome.stdout, test.expected or ""))
        passed += ok
        if not ok and not first_failure:
            first_failure = f"; test {i + 1}: {outcome.reason or 'wrong output'}"
    return passed / len(tests), f"{passed}/{len(tests)} tests passed{first_failure}"


def _score_remote(program: str, tests: list[CodeTest], backend: str, url: str, *, timeout: float,
                  memory_mb: int, image: str | None, wait: float) -> tuple[float, str]:
    """The per-test path on a Piston / SandboxFusion server or an E2B / Morph sandbox (code_remote, code_cloud)."""
    from grpo_cli.rewards.builtins.code_remote import run_remote

    passed = 0
    for test in tests:
        if test.script is not None:
            sentinel = f"grpo-tests-passed-{secrets.token_hex(8)}"
            run = run_remote(backend, url, f"{program}\n\n{test.script}\n\nprint({sentinel!r})\n", "",
                             timeout=timeout, memory_mb=memory_mb, image=image, wait=wait)
            passed += run.ok and run.stdout.rstrip().endswith(sentinel)
        else:
            run = run_remote(backend, url, program, test.stdin, timeout=timeout, memory_mb=memory_mb, image=image,
                             wait=wait)
            passed += run.ok and _same_output(run.stdout, test.expected or "")
    return passed / len(tests), f"{passed}/{len(tests)} tests passed on {backend}"


_Job = tuple[int, str, list[CodeTest]]


def _jobs(completions: Sequence[Any], tests: Any) -> tuple[list[float | None], list[str], list[_Job]]:
    """Rewards and notes for rows settled without running anything, and (row, program, tests) for the rest."""
    n = len(completions)
    if tests is None:
        cells: list[Any] = [None] * n
    elif isinstance(tests, str | Mapping):
        cells = [tests] * n
    else:
        cells = list(tests) + [None] * (n - len(tests))
    rewards: list[float | None] = [None] * n
    notes = ["no tests"] * n
    jobs: list[_Job] = []
    for i, (completion, cell) in enumerate(zip(completions, cells, strict=False)):
        parsed = parse_tests(cell)
        if parsed is None:
            continue
        program = extract_code(completion_text(completion))
        if program is None or not program.strip():
            rewards[i], notes[i] = 0.0, "no ```python block"
            continue
        jobs.append((i, program, parsed))
    return rewards, notes, jobs


def _score_job(job: _Job, *, backend: str, url: str, timeout: float, memory_mb: int,
               image: str | None, wait: float) -> tuple[float, str]:
    _, program, parsed = job
    if backend == "local":
        return score_program(program, parsed, timeout=timeout, memory_mb=memory_mb)
    return _score_remote(program, parsed, backend, url, timeout=timeout, memory_mb=memory_mb, image=image,
                         wait=wait)


def _map(score: Any, jobs: list[_Job], workers: int) -> list[tuple[float, str]]:
    """Score the jobs, `workers` at a time (threads: the work happens in the sandbox processes)."""
    if workers <= 1:
        return [score(job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="grpo-code") as pool:
        return list(pool.map(score, jobs))


def code(
    completions: Sequence[Any],
    *,
    tests: Any = None,
    timeout: float = 5.0,
    memory_mb: int = 512,
    backend: Literal["local", "piston", "sandbox-fusion", "e2b", "morph"] = "local",
    backend_url: str | None = None,
    backend_image: str | None = None,
    backend_wait: float = 30.0,
    parallel: int = 0,
    log_extra: Any = None,
    **kwargs: Any,
) -> list[float | None]:
    r"""Fraction of the row's tests the completion's code passes, run in the sandbox.

    Runs the completion's last fenced ```` ```python ```` (or ```` ```py ````) block against the row's tests. The
    `tests` column may hold a list of assert statements (`["assert add(1, 2) == 3", ...]`, one test each), one
    string of test code (e.g. a `check(candidate)` harness), or stdin/stdout pairs (`[{"input": "1 2\n",
    "output": "3\n"}]`, APPS-style `{"inputs": [...], "outputs": [...]}` (with `"fn_name"`: each input is the
    arguments of a call of that function, or of a LeetCode-style `Solution` method, whose result must equal the
    output), open-r1's `{"test_cases": [...]}`, or
    any of these as a JSON string; stdout must match up to trailing whitespace). All the tests of a completion
    run in ONE sandboxed process, in sequence, each in a fresh `__main__` with its own deadline; a test that
    hangs or crashes the process fails alone and a fresh process goes on with the next. An assert test passes
    when the solution and the test run to the end (an exception or `sys.exit(0)` before the asserts fails it).
    No code block gives 0.0; no tests (None, empty, unrecognised) gives None. What happened to each completion
    is logged as the `code_result` column of TRL's completions table.

    Args:
        completions: the sampled completions.
        tests: the row's tests (a dataset column).
        timeout: wall-clock seconds per test.
        memory_mb: address-space limit per sandboxed process, in MiB.
        backend: `local` (the warm sandbox), or `piston` / `sandbox-fusion`: each test sent to that server, or
            `e2b` / `morph`: each test run in one hosted sandbox per process (API key in `$E2B_API_KEY` /
            `$MORPH_API_KEY`; plain HTTP, no SDK; not verified against the live services).
        backend_url: its base address (default `http://localhost:2000` Piston, `http://localhost:8080` Fusion,
            the service's own API for e2b and morph).
        backend_image: the E2B template (default `code-interpreter-v1`) or the Morph snapshot id (required).
        backend_wait: seconds a remote backend may take beyond `timeout` to answer one test (queueing, start-up);
            a server that takes a request and sends nothing within `timeout + backend_wait` stops the reward.
        parallel: completions scored at once; 0 means one per free core. Set it with the entry's `parallel:`.

    Returns:
        0 ... 1; None for a row without tests.

    Example:
        >>> code(["```python\ndef add(a, b):\n    return a + b\n```"], tests=[["assert add(1, 2) == 3"]])
        [1.0]
    """
    from grpo_cli.rewards.builtins.code_remote import BACKENDS

    if backend not in BACKENDS:
        raise ValueError(f"unknown code backend {backend!r}: use one of {', '.join(BACKENDS)}")
    rewards, notes, jobs = _jobs(completions, tests)
    scored = _run_jobs(jobs, backend, backend_url, backend_image, timeout=timeout, memory_mb=memory_mb,
                       parallel=parallel, wait=backend_wait)
    for (i, _, _), (value, note) in zip(jobs, scored, strict=True):
        rewards[i], notes[i] = value, note
    if callable(log_extra):
        log_extra("code_result", notes)
    return rewards


def _run_jobs(jobs: list[_Job], backend: str, url: str | None, image: str | None, *, timeout: float,
              memory_mb: int, parallel: int, wait: float) -> list[tuple[float, str]]:
    """Score every (row, code, tests) job on the backend, `parallel` at once (0: one per free core); for the
    local sandbox the shared warm pool is grown to that many workers first."""
    from grpo_cli.rewards.builtins.code_remote import DEFAULT_URLS
    from grpo_cli.rewards.sandbox_client import default_workers, shared_pool

    score = functools.partial(_score_job, backend=backend, url=url or DEFAULT_URLS.get(backend, ""),
                              timeout=timeout, memory_mb=memory_mb, image=image, wait=wait)
    workers = max(1, min(parallel if parallel > 0 else default_workers(), len(jobs)))
    if backend == "local":
        shared_pool().ensure(workers)
    return _map(score, jobs, workers)
