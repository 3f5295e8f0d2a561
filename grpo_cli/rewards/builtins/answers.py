"""Answer extraction and equivalence, and the `accuracy` reward built on them.

A completion's answer is taken from where the recipe says (`answer_format`), the reference
is normalised the same way (GSM8K's "...#### 1,080" works as it is), and the two are equal
when any of these agree: normalised strings, numbers (with tolerance, fractions allowed),
or math-verify (LaTeX-aware) when it is installed.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal, get_args

AnswerFormat = Literal["auto", "answer_tag", "boxed", "gsm8k", "last_number", "first_number", "first_word"]
ANSWER_FORMATS: tuple[str, ...] = get_args(AnswerFormat)

_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?<![\w.])-?\.\d+")
_GSM8K = re.compile(r"####\s*([^\n]*)")
_MAX_VERIFY_CHARS = 400  # longer candidates are not worth a sympy blow-up


def _debug(message: str, *args: object) -> None:
    """Debug log; `logging` loads on first use (`grpo validate` imports this module, and never logs)."""
    import logging

    logging.getLogger(__name__).debug(message, *args)


def completion_text(completion: Any) -> str:
    """The text of a completion: the string itself, or the last assistant message's content."""
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence) and not isinstance(completion, str):
        messages = [m for m in completion if isinstance(m, dict)]
        for message in reversed(messages):
            if message.get("role", "assistant") == "assistant":
                return _content_text(message.get("content"))
        return _content_text(messages[-1].get("content")) if messages else ""
    return _content_text(completion)  # None, a plain string, or anything else as text


def _content_text(content: Any) -> str:
    """Message content may be a string or a list of parts ({"type": "text", "text": ...})."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def last_boxed(text: str) -> str | None:
    r"""Content of the last `\boxed{...}` (or `\fbox{...}`), nested braces included."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (6 if text.startswith("\\boxed", start) else 5)
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":  # "\boxed 5"
        match = re.match(r"[^\s$]+", text[i:])
        return match.group(0) if match else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


def tagged(text: str, tag: str) -> str | None:
    """Content of the last `<tag>...</tag>`, stripped."""
    matches = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    return matches[-1].strip() if matches else None


def numbers(text: str) -> list[str]:
    """Numbers in reading order, thousands separators removed ("1,080" -> "1080")."""
    return [m.replace(",", "") for m in _NUMBER.findall(text)]


def parse_completion_answer(text: str, answer_format: AnswerFormat = "auto", answer_tag: str = "answer") -> str | None:
    """The completion's final answer as a string, or None when there is none in that format."""
    if answer_format == "answer_tag":
        return tagged(text, answer_tag)
    if answer_format == "boxed":
        return last_boxed(text)
    if answer_format == "gsm8k":
        found = _GSM8K.findall(text)
        return found[-1].strip() if found else None
    if answer_format in ("last_number", "first_number"):
        found = numbers(text)
        return (found[-1] if answer_format == "last_number" else found[0]) if found else None
    if answer_format == "first_word":  # short free-text answers ("red", "three"), e.g. image questions
        match = re.search(r"[^\W_]+", text)
        return match.group(0) if match else None
    if answer_format != "auto":
        raise ValueError(f"unknown answer_format {answer_format!r}; use one of {', '.join(ANSWER_FORMATS)}")
    inner = tagged(text, answer_tag)
    if inner is not None:  # the tag's content may itself hold \boxed{} or ####
        return last_boxed(inner) or parse_completion_answer(inner, "gsm8k") or inner
    # Prefer what follows the reasoning: a number inside <think> is not the final answer.
    tail = text.rsplit("</think>", 1)[1] if "</think>" in text else ""
    for part in (tail, text):
        for fmt in ("boxed", "gsm8k", "last_number"):
            parsed = parse_completion_answer(part, fmt)
            if parsed:
                return parsed
    return None


def reference_answer(reference: Any) -> str | None:
    r"""Normalise a dataset reference: numbers as is, GSM8K "... #### 72", MATH "\boxed{}" solutions."""
    if reference is None:
        return None
    if isinstance(reference, bool):
        return str(reference)
    if isinstance(reference, int | float | Fraction):
        return None if isinstance(reference, float) and math.isnan(reference) else str(reference)
    text = str(reference).strip()
    if not text:
        return None
    if "####" in text:
        return parse_completion_answer(text, "gsm8k") or None
    return last_boxed(text) or text


@functools.lru_cache(maxsize=4096)
def _clean(s: str) -> str:
    s = s.strip().strip("$").strip()
    if "\\" in s:  # the LaTeX substitutions: plain answers (most of them, on every step) have no backslash
        s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
        s = re.sub(r"\\(?:left|right|!|,|;|:|displaystyle)", "", s)
        s = s.replace("\\$", "").replace("\\%", "%")
    if "frac" in s:
        s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    return s.strip().rstrip(".").strip()


@functools.lru_cache(maxsize=4096)  # a group repeats its reference and small answers recur: pure, so cached
def to_number(s: str) -> float | None:
    r"""Parse "1,080", "-3", "0.5", "1/2", "\frac{1}{2}", "50%" (-> 50), "$12" into a float."""
    s = _clean(s).replace(" ", "")
    if s.endswith("%"):
        s = s[:-1]
    frac = (re.fullmatch(r"(-?)\\frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", s) or re.fullmatch(
        r"(-?)\\frac(\d)(\d)", s)) if "\\frac" in s else None
    try:
        if frac:
            value = float(Fraction(frac.group(2)) / Fraction(frac.group(3)))
            return -value if frac.group(1) else value
        if re.fullmatch(r"-?(?:\d{1,3}(?:,\d{3})+|\d*)(?:\.\d+)?(?:/\d+)?", s) and any(c.isdigit() for c in s):
            s = s.replace(",", "")
            value = float(s) if "/" not in s else 0.0  # what float(Fraction(s)) gives, at a tenth of the cost,
            if value == 0.0:  # except for the sign of a zero ("-0" -> 0.0, "-0.0...01" -> -0.0) and fractions
                return float(Fraction(s))
            return None if math.isinf(value) else value  # where Fraction raises OverflowError
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def _numbers_equal(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _math_verify_equal(pred: str, ref: str) -> bool | None:
    """math-verify's verdict, or None when it is not installed or fails on this input."""
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    main_thread = threading.current_thread() is threading.main_thread()
    timeout = 5 if main_thread else None  # math-verify's timeouts use SIGALRM: main thread only
    if not main_thread:
        import logging

        logging.getLogger("math_verify").setLevel(logging.ERROR)
    try:
        gold = parse(f"\\boxed{{{ref}}}", parsing_timeout=timeout)
        for text in (f"\\boxed{{{pred}}}", pred):
            answer = parse(text, parsing_timeout=timeout)
            if gold and answer and verify(gold, answer, timeout_seconds=timeout):
                return True
        return False
    except Exception as exc:  # math-verify raises anything on odd input
        _debug("math-verify failed on %r vs %r: %s", pred, ref, exc)
        return None


def answers_match(pred: str | None, ref: str | None, *, use_math_verify: bool = True) -> bool:
    """Whether an extracted answer equals a normalised reference (string, number or math-verify)."""
    if pred is None or ref is None:
        return False
    p, r = _clean(pred), _clean(ref)
    if not p:
        return False
    if p.replace(" ", "").lower() == r.replace(" ", "").lower():
        return True
    rn = to_number(r)
    if rn is not None:
        pn = to_number(p)
        if pn is not None:  # two plain numbers: decisive, no need for math-verify
            return _numbers_equal(pn, rn)
        found = numbers(p) if len(p) <= 100 else []
        if len(found) == 1:  # "72 apples": accept a lone number, never pick one of several
            lone = to_number(found[0])
            if lone is not None and _numbers_equal(lone, rn):
                return True
    if use_math_verify and len(p) <= _MAX_VERIFY_CHARS and len(r) <= _MAX_VERIFY_CHARS:
        return bool(_math_verify_equal(p, r))
    return False


def row_references(n: int, answer: Any = None, solution: Any = None) -> list[Any]:
    """Per-row references from the `answer` column, else open-r1's `solution` column."""
    column = answer if answer is not None else solution
    if column is None:
        return [None] * n
    if isinstance(column, str) or not isinstance(column, Sequence):
        return [column] * n
    return list(column) + [None] * (n - len(column))


def accuracy(
    completions: Sequence[Any],
    *,
    answer: Any = None,
    solution: Any = None,
    answer_format: AnswerFormat = "auto",
    answer_tag: str = "answer",
    use_math_verify: bool = True,
    **kwargs: Any,
) -> list[float | None]:
    r"""Final answer equals the reference answer.

    The reference is the `answer` column, or open-r1's `solution` column when there is no `answer`. It is
    normalised: a GSM8K answer (`"... \n#### 1,080"`) becomes what follows the last `####`, a MATH solution the
    content of its last `\boxed{}`; plain numbers stay as they are.

    Equivalence, first that applies: equal after normalisation (`$`, `\text{}`, `\left`, spaces, trailing
    period, case); if both are plain numbers (`1,080`, `-3`, `0.5`, `1/2`, `\frac{1}{2}`, `50%`, `$12`),
    numeric equality with relative tolerance 1e-6 (decisive); an answer holding exactly one number
    (`72 apples`) is compared by that number; otherwise math-verify (`\frac{1}{2}` = `0.5`, `x+1` = `1+x`,
    sets, intervals) when it is installed (`pip install grpo-cli[math]`). math-verify errors count as "not
    equal"; candidates over 400 characters skip it.

    Args:
        completions: the sampled completions (plain strings or chat messages).
        answer: the reference answers, one per completion (a dataset column).
        solution: open-r1's reference column, used when there is no `answer`.
        answer_format: where the completion's answer is: `auto` (the last `<answer>...</answer>`, within it a
            `\boxed{}` or `####` if any; else, after `</think>` first, the last `\boxed{}`, then `#### N`, then
            the last number), `answer_tag`, `boxed`, `gsm8k` (the rest of the line after the last `####`),
            `last_number`, `first_number` or `first_word` (the first run of letters/digits: short free-text
            answers such as a colour).
        answer_tag: the tag name `answer_tag` and `auto` read.
        use_math_verify: use math-verify when installed (numeric and string checks otherwise).

    Returns:
        {0, 1}; None for a row without a reference.

    Example:
        >>> accuracy(["<think>6*12</think><answer>72</answer>", "<answer>70</answer>"], answer=["#### 72"] * 2)
        [1.0, 0.0]
        >>> accuracy([r"so the result is \boxed{\frac{1}{2}}"], answer=["0.5"])
        [1.0]
        >>> accuracy(["Red.", "blue"], answer=["red", "red"], answer_format="first_word")
        [1.0, 0.0]
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"unknown answer_format {answer_format!r}; use one of {', '.join(ANSWER_FORMATS)}")
    verify = use_math_verify and answer_format != "first_word"
    return [_accuracy_row(completion, reference, answer_format, answer_tag, verify)
            for completion, reference in zip(completions, row_references(len(completions), answer, solution),
                                             strict=False)]


def _accuracy_row(completion: Any, reference: Any, answer_format: AnswerFormat, answer_tag: str,
                  use_math_verify: bool) -> float | None:
    """One row of `accuracy`: None without a reference; an error while parsing or comparing counts as wrong,
    because one odd row must not stop training."""
    ref = reference_answer(reference)
    if ref is None:
        return None
    try:
        pred = parse_completion_answer(completion_text(completion), answer_format, answer_tag)
        return 1.0 if answers_match(pred, ref, use_math_verify=use_math_verify) else 0.0
    except Exception as exc:
        _debug("accuracy check failed: %s", exc)
        return 0.0
