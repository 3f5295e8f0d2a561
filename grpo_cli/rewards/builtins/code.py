"""The `code` reward: run the completion's last ```python block against the row's tests, sandboxed."""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    dicts, APPS-style {"inputs": [...], "outputs": [...]}, open-r1's {"test_cases": [...]},
    or any of these JSON-encoded in a string.
    """
    if tests is None:
        return None
    if isinstance(tests, str):
        text = tests.strip()
        if not text:
            return None
        if text[0] in "[{":
            try:
                return parse_tests(json.loads(text))
            except (ValueError, RecursionError):
                pass
        return [CodeTest(script=text)]
    if isinstance(tests, Mapping):
        if "test_cases" in tests:
            return parse_tests(tests["test_cases"])
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


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def _same_output(actual: str, expected: str) -> bool:
    """Judge-style comparison: ignore trailing whitespace on each line and trailing blank lines."""
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip().splitlines()]

    return norm(actual) == norm(expected)


def run_test(program: str, test: CodeTest, *, timeout: float, memory_mb: int) -> bool:
    """Whether one test passes; any failure of the sandbox itself counts as a failed test."""
    from grpo_cli.rewards.sandbox import run_python

    try:
        if test.script is not None:
            # The sentinel proves the tests ran to the end: `exit(0)` before them must not pass.
            sentinel = f"grpo-tests-passed-{secrets.token_hex(8)}"
            source = f"{program}\n\n{test.script}\n\nprint({sentinel!r})\n"
            result = run_python(source, timeout=timeout, memory_mb=memory_mb)
            return result.ok and result.stdout.rstrip().endswith(sentinel)
        expected = test.expected or ""
        cap = max(65536, 2 * len(expected.encode()) + 1024)
        result = run_python(program, test.stdin, timeout=timeout, memory_mb=memory_mb, max_output_bytes=cap)
        return result.ok and _same_output(result.stdout, expected)
    except Exception as exc:  # an unexpected sandbox error fails the test, never the step
        _log.warning("code reward: sandbox error: %s", exc)
        return False


def code(
    completions: Sequence[Any],
    *,
    tests: Any = None,
    timeout: float = 5.0,
    memory_mb: int = 512,
    **kwargs: Any,
) -> list[float | None]:
    r"""Fraction of the row's tests the completion's code passes, run in the sandbox.

    Runs the completion's last fenced ```` ```python ```` (or ```` ```py ````) block against the row's tests. The
    `tests` column may hold a list of assert statements (`["assert add(1, 2) == 3", ...]`), one string of test
    code (e.g. a `check(candidate)` harness), or stdin/stdout pairs (`[{"input": "1 2\n", "output": "3\n"}]`,
    APPS-style `{"inputs": [...], "outputs": [...]}`, open-r1's `{"test_cases": [...]}`, or any of these as a
    JSON string; stdout must match up to trailing whitespace). A test passes only if the program exits 0
    within its limits; assert tests must also reach a sentinel printed after them, so `sys.exit(0)` before
    the tests does not pass. No code block gives 0.0; no tests (None, empty, unrecognised) gives None.

    Args:
        completions: the sampled completions.
        tests: the row's tests (a dataset column).
        timeout: wall-clock seconds per program.
        memory_mb: address-space limit per program, in MiB.

    Returns:
        0 ... 1; None for a row without tests.

    Example:
        >>> code(["```python\ndef add(a, b):\n    return a + b\n```"], tests=[["assert add(1, 2) == 3"]])
        [1.0]
    """
    n = len(completions)
    if tests is None:
        cells: list[Any] = [None] * n
    elif isinstance(tests, str | Mapping):
        cells = [tests] * n
    else:
        cells = list(tests) + [None] * (n - len(tests))
    rewards: list[float | None] = []
    for completion, cell in zip(completions, cells, strict=False):
        parsed = parse_tests(cell)
        if parsed is None:
            rewards.append(None)
            continue
        program = extract_code(completion_text(completion))
        if program is None or not program.strip():
            rewards.append(0.0)
            continue
        passed = sum(run_test(program, t, timeout=timeout, memory_mb=memory_mb) for t in parsed)
        rewards.append(passed / len(parsed))
    return rewards
