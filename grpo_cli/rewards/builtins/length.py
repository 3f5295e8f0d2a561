"""Length-shaping rewards: Kimi 1.5 length, cosine scaling, n-gram repetition, DAPO overlong.

Lengths are in tokens when the trainer passes `completion_ids` (it always does in training)
and in characters otherwise (a direct call with text only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from grpo_cli.rewards.builtins.answers import completion_text, correctness


def completion_lengths(completions: Sequence[Any], completion_ids: Sequence[Any] | None = None) -> list[int]:
    """Token counts from `completion_ids` when given for every row, else character counts."""
    if completion_ids is not None and len(completion_ids) == len(completions):
        try:
            return [len(ids) for ids in completion_ids]
        except TypeError:
            pass
    return [len(completion_text(c)) for c in completions]


def length(
    completions: Sequence[Any],
    *,
    answer: Any = None,
    solution: Any = None,
    completion_ids: Sequence[Any] | None = None,
    answer_format: str = "auto",
    answer_tag: str = "answer",
    use_math_verify: bool = True,
    **kwargs: Any,
) -> list[float | None]:
    """Kimi 1.5 length reward: shorter than the batch's others is better; wrong answers never gain.

    lambda = 0.5 - (len - min_len) / (max_len - min_len) over this call's rows with a reference;
    correct -> lambda, wrong -> min(0, lambda); all the same length -> 0; no reference -> None.
    """
    verdicts = correctness(completions, answer, solution, answer_format=answer_format,
                           answer_tag=answer_tag, use_math_verify=use_math_verify)
    lengths = completion_lengths(completions, completion_ids)
    judged = [n for n, v in zip(lengths, verdicts, strict=True) if v is not None]
    if not judged:
        return [None] * len(completions)
    lo, hi = min(judged), max(judged)
    rewards: list[float | None] = []
    for n, correct in zip(lengths, verdicts, strict=True):
        if correct is None:
            rewards.append(None)
        elif hi == lo:
            rewards.append(0.0)
        else:
            lam = 0.5 - (n - lo) / (hi - lo)
            rewards.append(lam if correct else min(0.0, lam))
    return rewards


def cosine(
    completions: Sequence[Any],
    *,
    answer: Any = None,
    solution: Any = None,
    completion_ids: Sequence[Any] | None = None,
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    max_len: int = 1000,
    answer_format: str = "auto",
    answer_tag: str = "answer",
    use_math_verify: bool = True,
    **kwargs: Any,
) -> list[float | None]:
    """Correctness scaled by length on a cosine: short right answers best, short wrong ones worst.

    r = v_min + 0.5 * (v_max - v_min) * (1 + cos(pi * min(len, max_len) / max_len)); correct uses
    (min_value_correct, max_value_correct), wrong uses (max_value_wrong, min_value_wrong) swapped.
    """
    if max_len <= 0:
        raise ValueError(f"max_len must be positive, got {max_len}")
    verdicts = correctness(completions, answer, solution, answer_format=answer_format,
                           answer_tag=answer_tag, use_math_verify=use_math_verify)
    rewards: list[float | None] = []
    for n, correct in zip(completion_lengths(completions, completion_ids), verdicts, strict=True):
        if correct is None:
            rewards.append(None)
            continue
        # Clamped as in TRL: cos is periodic, so past max_len the reward would climb back up.
        cos = math.cos(math.pi * min(n / max_len, 1.0))
        if correct:
            lo, hi = min_value_correct, max_value_correct
        else:
            lo, hi = max_value_wrong, min_value_wrong
        rewards.append(lo + 0.5 * (hi - lo) * (1.0 + cos))
    return rewards


def _units(text: str, language: str) -> list[str]:
    if language == "en":
        return text.lower().split()
    if language in ("zh", "ja", "char"):  # no word segmenter needed: character n-grams
        return [ch for ch in text if not ch.isspace()]
    raise ValueError(f"repetition_penalty language {language!r} is not supported; use en, zh, ja or char")


def repetition_penalty(
    completions: Sequence[Any],
    *,
    ngram_size: int = 3,
    max_penalty: float = -0.5,
    language: str = "en",
    **kwargs: Any,
) -> list[float]:
    """Penalises repeated n-grams: (1 - unique / total n-grams) * max_penalty (0 for no repeats).

    Words (lower-cased, whitespace-split) for language="en"; characters for zh/ja/char.
    Empty completions and ones shorter than `ngram_size` units get 0.
    """
    if max_penalty > 0:
        raise ValueError(f"max_penalty {max_penalty} should not be positive")
    if ngram_size < 1:
        raise ValueError(f"ngram_size must be >= 1, got {ngram_size}")
    rewards = []
    for c in completions:
        units = _units(completion_text(c), language)
        if len(units) < ngram_size:
            rewards.append(0.0)
            continue
        grams = list(zip(*(units[i:] for i in range(ngram_size)), strict=False))
        scaling = 1 - len(set(grams)) / len(grams)
        rewards.append(scaling * max_penalty if scaling else 0.0)
    return rewards


def soft_overlong_punishment(
    completions: Sequence[Any],
    *,
    completion_ids: Sequence[Any] | None = None,
    max_completion_len: int = 1024,
    soft_punish_cache: int = 256,
    **kwargs: Any,
) -> list[float]:
    """DAPO's soft overlong punishment: 0 up to max - cache, a linear ramp to -1 at max, -1 beyond.

    Set `max_completion_len` to the trainer's max_completion_length.
    """
    if not 0 <= soft_punish_cache <= max_completion_len:
        raise ValueError("need 0 <= soft_punish_cache <= max_completion_len")
    safe = max_completion_len - soft_punish_cache
    rewards = []
    for n in completion_lengths(completions, completion_ids):
        if n <= safe:
            rewards.append(0.0)
        elif n <= max_completion_len:
            rewards.append((safe - n) / soft_punish_cache)
        else:
            rewards.append(-1.0)
    return rewards
