"""Length-shaping rewards: Kimi 1.5 length, cosine scaling, n-gram repetition, DAPO overlong.

Lengths are in tokens when the trainer passes `completion_ids` (it always does in training)
and in characters otherwise (a direct call with text only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from grpo_cli.rewards.builtins.answers import AnswerFormat, accuracy, completion_text


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
    answer_format: AnswerFormat = "auto",
    answer_tag: str = "answer",
    use_math_verify: bool = True,
    **kwargs: Any,
) -> list[float | None]:
    """Shorter than the batch's other completions (Kimi 1.5); wrong answers never gain.

    open-r1's `len_reward`. Over the rows of one call that have a reference, with `min_len` / `max_len` the
    shortest / longest of them, `lambda = 0.5 - (len - min_len) / (max_len - min_len)`; a correct answer gets
    `lambda`, a wrong one `min(0, lambda)`; all the same length gives 0. Correctness is `accuracy`'s check.
    Lengths are tokens (characters without `completion_ids`). With a `parallel` pool, the batch is each
    worker's chunk.

    Args:
        completions: the sampled completions.
        answer: the reference answers (a dataset column).
        solution: open-r1's reference column, used when there is no `answer`.
        completion_ids: token ids of the completions (TRL passes them during training).
        answer_format: as `accuracy`.
        answer_tag: as `accuracy`.
        use_math_verify: as `accuracy`.

    Returns:
        -0.5 ... 0.5; None for a row without a reference.

    Example:
        >>> length(["<answer>4</answer>", "it is <answer>4</answer>", "<answer>5</answer>"], answer=["4"] * 3)
        [0.5, -0.5, 0.0]
    """
    verdicts = accuracy(completions, answer=answer, solution=solution, answer_format=answer_format,
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
    length_unit: Literal["tokens", "characters"] = "tokens",
    answer_format: AnswerFormat = "auto",
    answer_tag: str = "answer",
    use_math_verify: bool = True,
    **kwargs: Any,
) -> list[float | None]:
    """Correctness scaled by length on a cosine: short right answers best, short wrong ones worst.

    open-r1's / TRL's `get_cosine_scaled_reward`:
    `r = v_min + 0.5 * (v_max - v_min) * (1 + cos(pi * min(len, max_len) / max_len))`, with
    `(v_min, v_max) = (min_value_correct, max_value_correct)` for a correct answer and
    `(max_value_wrong, min_value_wrong)` (swapped) for a wrong one, so long wrong answers are punished less,
    keeping exploration. Lengths past `max_len` are clamped (as in TRL; open-r1 lets the cosine climb back).
    Lengths are tokens (characters without `completion_ids`): set `max_len` to `max_completion_length`.
    `length_unit: characters` counts characters of the completion text, as open-r1 does (its `max_len` is
    in characters).

    Args:
        completions: the sampled completions.
        answer: the reference answers (a dataset column).
        solution: open-r1's reference column, used when there is no `answer`.
        completion_ids: token ids of the completions (TRL passes them during training).
        min_value_wrong: reward of a wrong answer of length 0.
        max_value_wrong: reward of a wrong answer at `max_len`.
        min_value_correct: reward of a correct answer at `max_len`.
        max_value_correct: reward of a correct answer of length 0.
        max_len: the length where the cosine ends (> 0).
        length_unit: `tokens` (TRL's completion_ids) or `characters` (open-r1's `len(content)`).
        answer_format: as `accuracy`.
        answer_tag: as `accuracy`.
        use_math_verify: as `accuracy`.

    Returns:
        -1 ... 1 with the defaults; None for a row without a reference.

    Example:
        >>> cosine(["<answer>4</answer>", "<answer>5</answer>"], answer=["4", "4"], completion_ids=[[0] * 500] * 2)
        [0.75, -0.75]
    """
    _check_cosine_length(max_len, length_unit)
    verdicts = accuracy(completions, answer=answer, solution=solution, answer_format=answer_format,
                        answer_tag=answer_tag, use_math_verify=use_math_verify)
    lengths = completion_lengths(completions, completion_ids if length_unit == "tokens" else None)
    # (reward at length 0, reward at max_len): a right answer falls with length, a wrong one rises.
    ends = {True: (max_value_correct, min_value_correct), False: (min_value_wrong, max_value_wrong)}
    return [None if correct is None else _on_cosine(n, max_len, *ends[bool(correct)])
            for n, correct in zip(lengths, verdicts, strict=True)]


def _check_cosine_length(max_len: int, length_unit: str) -> None:
    """`cosine`'s length settings, refused before any completion is scored."""
    if max_len <= 0:
        raise ValueError(f"max_len must be positive, got {max_len}")
    if length_unit not in ("tokens", "characters"):
        raise ValueError(f"length_unit must be tokens or characters, got {length_unit!r}")


def _on_cosine(n: int, max_len: int, at_zero: float, at_max: float) -> float:
    """Half a cosine from `at_zero` (length 0) to `at_max` (length `max_len`). Clamped there as in TRL: cos is
    periodic, so past max_len the reward would climb back up."""
    cos = math.cos(math.pi * min(n / max_len, 1.0))
    return at_max + 0.5 * (at_zero - at_max) * (1.0 + cos)


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
    language: Literal["en", "zh", "ja", "char"] = "en",
    **kwargs: Any,
) -> list[float]:
    """Repeated n-grams, as a penalty.

    open-r1's `get_repetition_penalty_reward`: `(1 - unique_ngrams / total_ngrams) * max_penalty` over the
    n-grams of lower-cased whitespace-separated words (`language: en`) or of characters (`zh`, `ja`, `char`:
    no word segmenter needed). Empty completions and ones shorter than `ngram_size` units get 0.

    Args:
        completions: the sampled completions.
        ngram_size: n of the n-grams (>= 1).
        max_penalty: the penalty of a completion that is all repeats (<= 0).
        language: `en` (words), `zh`, `ja` or `char` (characters).

    Returns:
        max_penalty ... 0

    Example:
        >>> repetition_penalty(["a b c a b c", "every word here is new"])
        [-0.125, 0.0]
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
    """Running past the length budget (DAPO's soft overlong punishment).

    TRL's `get_soft_overlong_punishment`, with `L` the completion length in tokens (characters without
    `completion_ids`): 0 while `L <= max_completion_len - soft_punish_cache`, a linear ramp down to -1 at
    `max_completion_len`, -1 beyond.

    Args:
        completions: the sampled completions.
        completion_ids: token ids of the completions (TRL passes them during training).
        max_completion_len: set it to the trainer's `max_completion_length`.
        soft_punish_cache: width of the linear ramp; 0 gives a hard cut.

    Returns:
        -1 ... 0

    Example:
        >>> soft_overlong_punishment(["x"] * 3, completion_ids=[[0] * 10, [0] * 15, [0] * 30],
        ...                          max_completion_len=20, soft_punish_cache=10)
        [0.0, -0.5, -1.0]
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
