"""The run summary's one rule: the first and the last fifth of the training logs, averaged.

`grpo train` prints it, `grpo report` writes it (with the best window too) and the model card shows it; all three
take their windows and means from here, so they agree on a run.
"""

from __future__ import annotations

from typing import Any

from grpo_cli.artefacts.report_data import num, reward_keys

HEADLINE = ("reward_std", "frac_reward_zero_std", "dynamic_sampling/zero_std_trained",
            "dynamic_sampling/dropped_groups", "completions/mean_length", "completions/clipped_ratio", "kl", "entropy",
            "loss")
"""What a run's summary shows after the reward and each reward function's mean (`grpo train`, the model card;
`grpo report` adds the optimizer's and the tools' metrics)."""


def summary_window(num_logs: int) -> int:
    """How many logging steps the first/last summary windows average: a fifth of the run, at least one."""
    return max(1, num_logs // 5)


def step_span(first: Any, last: Any) -> str:
    """How a window is labelled everywhere (`grpo report`, the model card): `step 4` or `steps 1–4`."""
    return f"step {first}" if first == last else f"steps {first}–{last}"


def training_logs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training records of a run's logs (the ones that carry a reward; evaluation rows do not)."""
    return [r for r in records if "reward" in r]


def window_mean(records: list[dict[str, Any]], key: str) -> float | None:
    """Mean of `key` over `records`, skipping rows without a finite number (None when there is none)."""
    vals = [v for r in records if (v := num(r.get(key))) is not None]
    return sum(vals) / len(vals) if vals else None


def first_and_last(logs: list[dict[str, Any]], keys: list[str]) -> list[tuple[str, float | None, float | None]]:
    """(key, mean over the first window, mean over the last window) for each key, over training logs."""
    size = summary_window(len(logs))
    first, last = logs[:size], logs[-size:]
    return [(key, window_mean(first, key), window_mean(last, key)) for key in keys]


def summary_keys(logs: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> list[str]:
    """The summary's metrics in display order: the reward, each reward's mean, HEADLINE, `extra`; only those
    the logs hold a number for."""
    keys = ["reward", *reward_keys(logs), *HEADLINE, *extra]
    return [k for k in keys if any(num(r.get(k)) is not None for r in logs)]


def run_summary(records: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(metric, first-window mean, last-window mean) of a run's logs, as `grpo train` prints it at the end."""
    logs = training_logs(records)
    return [(k, a, b) for k, a, b in first_and_last(logs, summary_keys(logs)) if a is not None and b is not None]


def one_log_note(logs: int, status: str, logging_steps: float, resumed: bool) -> str:
    """Why first and last agree when a run logged one training step, with the fix; "" where that fix does not
    apply: a run a guard, a signal or an error ended (it stopped early for its own reason), or one that logged
    every step already."""
    if logs != 1 or status != "completed" or logging_steps == 1:
        return ""
    cause = ("this resumed run had no more steps left than training.logging_steps" if resumed else
             "training.max_steps is not above training.logging_steps")
    return (f"the run logged one step ({cause}), so first and last are the same step and the plots have one point; "
            "set training.logging_steps=1 for curves")
