"""Format rewards: think/answer tags, step-by-step reasoning, fenced code (open-r1 semantics)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from grpo_cli.rewards.builtins.answers import completion_text

_STEP = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)", re.MULTILINE)


def _tags(think_tag: str, answer_tag: str) -> tuple[str, str]:
    return re.escape(think_tag), re.escape(answer_tag)


def _layout(completions: Sequence[Any], pattern: str, think_tag: str, answer_tag: str, *, whole: bool) -> list[float]:
    """1.0 where `pattern` (`{t}`, `{a}`: the escaped tags; `.` matches newlines) matches from the start of the
    completion (`whole`, the pattern anchors its end) or anywhere in it."""
    t, a = _tags(think_tag, answer_tag)
    compiled = re.compile(pattern.replace("{t}", t).replace("{a}", a), re.DOTALL)
    test = compiled.match if whole else compiled.search
    return [1.0 if test(completion_text(c)) else 0.0 for c in completions]


def format_reward(
    completions: Sequence[Any], *, think_tag: str = "think", answer_tag: str = "answer", **kwargs: Any
) -> list[float]:
    r"""Exact `<think>...</think><answer>...</answer>` layout.

    The whole completion must match `^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$` (`.` matches
    newlines): nothing may come before `<think>` or after `</answer>` (one trailing newline is tolerated).
    open-r1 uses `re.MULTILINE`, which lets text follow `</answer>` on a new line; this one does not.

    Args:
        completions: the sampled completions.
        think_tag: the reasoning tag, e.g. `reasoning` for `<reasoning>...</reasoning>`.
        answer_tag: the answer tag.

    Returns:
        {0, 1}

    Example:
        >>> format_reward(["<think>\n2+2\n</think>\n<answer>\n4\n</answer>", "4"])
        [1.0, 0.0]
    """
    return _layout(completions, r"^<{t}>\n.*?\n</{t}>\n<{a}>\n.*?\n</{a}>$", think_tag, answer_tag, whole=True)


def soft_format(
    completions: Sequence[Any], *, think_tag: str = "think", answer_tag: str = "answer", **kwargs: Any
) -> list[float]:
    r"""A think block followed by an answer block, anywhere in the completion.

    Searches for `<think>.*?</think>\s*<answer>.*?</answer>` (`.` matches newlines).

    Args:
        completions: the sampled completions.
        think_tag: the reasoning tag.
        answer_tag: the answer tag.

    Returns:
        {0, 1}
        1 when both blocks are there, in order, whatever surrounds them.

    Example:
        >>> soft_format(["Sure. <think>2+2</think> <answer>4</answer> Done.", "<answer>4</answer><think>2+2</think>"])
        [1.0, 0.0]
        >>> soft_format(["<answer>4</answer>"])
        [0.0]
    """
    return _layout(completions, r"<{t}>.*?</{t}>\s*<{a}>.*?</{a}>", think_tag, answer_tag, whole=False)


def tag_count(
    completions: Sequence[Any], *, think_tag: str = "think", answer_tag: str = "answer", **kwargs: Any
) -> list[float]:
    r"""Each of the four tags present exactly once.

    0.25 for each of `<think>\n`, `\n</think>\n`, `\n<answer>\n`, `\n</answer>` that occurs exactly once: a
    dense, partial-credit signal that teaches the layout before `format` can fire.

    Args:
        completions: the sampled completions.
        think_tag: the reasoning tag.
        answer_tag: the answer tag.

    Returns:
        0 ... 1 in steps of 0.25

    Example:
        >>> tag_count(["<think>\nhm\n</think>\n<answer>\n4\n</answer>", "<think>\nhm\n</think>\n4"])
        [1.0, 0.5]
    """
    markers = (f"<{think_tag}>\n", f"\n</{think_tag}>\n", f"\n<{answer_tag}>\n", f"\n</{answer_tag}>")
    rewards = []
    for c in completions:
        text = completion_text(c)
        rewards.append(sum(0.25 for m in markers if text.count(m) == 1))
    return rewards


def reasoning_steps(completions: Sequence[Any], *, min_steps: int = 3, **kwargs: Any) -> list[float]:
    r"""Visible step-by-step reasoning.

    `min(1, steps / min_steps)`, where a step is a match of `Step \d+:`, a numbered line `N.`, a `-` or `*`
    bullet, or `First,` / `Second,` / `Next,` / `Finally,`. Unlike open-r1, numbered items count at the start
    of every line, so a list `1. ... 2. ... 3. ...` counts 3.

    Args:
        completions: the sampled completions.
        min_steps: steps needed for the full reward (>= 1).

    Returns:
        0 ... 1

    Example:
        >>> reasoning_steps(["1. add\n2. carry\n3. done", "First, add. Finally, done."])
        [1.0, 0.6666666666666666]
    """
    if min_steps < 1:
        raise ValueError(f"min_steps must be >= 1, got {min_steps}")
    return [min(1.0, len(_STEP.findall(completion_text(c))) / min_steps) for c in completions]


def code_format(
    completions: Sequence[Any],
    *,
    language: str | Sequence[str | None] = "python",
    think_tag: str = "think",
    answer_tag: str = "answer",
    **kwargs: Any,
) -> list[float]:
    r"""Think tags followed by an answer holding a fenced code block.

    open-r1's `get_code_format_reward`: the completion must match
    `^<think>\n.*?\n</think>\n<answer>\n.*?```python.*?```.*?\n</answer>$` (`.` matches newlines). When the data
    has a `language` column (multi-language code sets), TRL passes it as `language` and each row's fence must
    carry its own language; an empty cell means `python`.

    Args:
        completions: the sampled completions.
        language: the fence's language tag, or (a `language` column) one per completion.
        think_tag: the reasoning tag.
        answer_tag: the answer tag.

    Returns:
        {0, 1}

    Example:
        >>> code_format(["<think>\nloop\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>", "print(1)"])
        [1.0, 0.0]
    """
    t, a = _tags(think_tag, answer_tag)
    languages = [language] * len(completions) if isinstance(language, str) else list(language)
    if len(languages) != len(completions):
        raise ValueError(f"code_format: {len(languages)} languages for {len(completions)} completions")
    out = []
    for completion, lang in zip(completions, languages, strict=True):
        fence = re.escape(str(lang or "python").strip().lower())
        pattern = re.compile(rf"^<{t}>\n.*?\n</{t}>\n<{a}>\n.*?```{fence}.*?```.*?\n</{a}>$", re.DOTALL)
        out.append(1.0 if pattern.match(completion_text(completion)) else 0.0)
    return out
