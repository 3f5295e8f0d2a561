"""Format rewards: think/answer tags, step-by-step reasoning, fenced code (open-r1 semantics)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from grpo_cli.rewards.builtins.answers import completion_text

_STEP = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)", re.MULTILINE)


def _tags(think_tag: str, answer_tag: str) -> tuple[str, str]:
    return re.escape(think_tag), re.escape(answer_tag)


def format_reward(
    completions: Sequence[Any], *, think_tag: str = "think", answer_tag: str = "answer", **kwargs: Any
) -> list[float]:
    """1.0 when the whole completion is exactly <think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>.

    Strict: nothing may come before <think> or after </answer> (one trailing newline is allowed).
    """
    t, a = _tags(think_tag, answer_tag)
    pattern = re.compile(rf"^<{t}>\n.*?\n</{t}>\n<{a}>\n.*?\n</{a}>$", re.DOTALL)
    return [1.0 if pattern.match(completion_text(c)) else 0.0 for c in completions]


def soft_format(
    completions: Sequence[Any], *, think_tag: str = "think", answer_tag: str = "answer", **kwargs: Any
) -> list[float]:
    """1.0 when a <think>...</think> block is followed by an <answer>...</answer> block, anywhere."""
    t, a = _tags(think_tag, answer_tag)
    pattern = re.compile(rf"<{t}>.*?</{t}>\s*<{a}>.*?</{a}>", re.DOTALL)
    return [1.0 if pattern.search(completion_text(c)) else 0.0 for c in completions]


def tag_count(
    completions: Sequence[Any], *, think_tag: str = "think", answer_tag: str = "answer", **kwargs: Any
) -> list[float]:
    """0.25 for each of <think>\\n, \\n</think>\\n, \\n<answer>\\n, \\n</answer> present exactly once.

    A dense, partial-credit signal that teaches the tag layout before `format` can fire.
    """
    markers = (f"<{think_tag}>\n", f"\n</{think_tag}>\n", f"\n<{answer_tag}>\n", f"\n</{answer_tag}>")
    rewards = []
    for c in completions:
        text = completion_text(c)
        rewards.append(sum(0.25 for m in markers if text.count(m) == 1))
    return rewards


def reasoning_steps(completions: Sequence[Any], *, min_steps: int = 3, **kwargs: Any) -> list[float]:
    """Rewards visible step-by-step reasoning: min(1, steps / min_steps).

    A step is "Step N:", a numbered line "N.", a "-" or "*" bullet, or First,/Second,/Next,/Finally,.
    Unlike open-r1, numbered items count on every line, not only at the very start.
    """
    if min_steps < 1:
        raise ValueError(f"min_steps must be >= 1, got {min_steps}")
    return [min(1.0, len(_STEP.findall(completion_text(c))) / min_steps) for c in completions]


def code_format(
    completions: Sequence[Any],
    *,
    language: str = "python",
    think_tag: str = "think",
    answer_tag: str = "answer",
    **kwargs: Any,
) -> list[float]:
    """1.0 when think tags are followed by an answer that contains a fenced ```python code block."""
    t, a = _tags(think_tag, answer_tag)
    lang = re.escape(language)
    pattern = re.compile(rf"^<{t}>\n.*?\n</{t}>\n<{a}>\n.*?```{lang}.*?```.*?\n</{a}>$", re.DOTALL)
    return [1.0 if pattern.match(completion_text(c)) else 0.0 for c in completions]
