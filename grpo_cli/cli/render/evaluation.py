"""Rendering of `grpo eval`: per-model reward tables and benchmark suites."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from grpo_cli.cli.render.tables import print_table

if TYPE_CHECKING:
    from grpo_cli.evaluation.command import EvalOutcome
    from grpo_cli.evaluation.scoring import EvalResult


def _fmt_metric(key: str, value: Any) -> str:
    from grpo_cli.artefacts.report_data import number_text

    if isinstance(value, float) and key.endswith("/rate"):
        return f"{100 * value:.1f}%"
    return str(value) if isinstance(value, str) else number_text(value)


def render_eval_outcome(console: Console, outcome: EvalOutcome) -> None:
    """`grpo eval`: the suite table or the per-model reward table, notes, and where the results went."""
    for note in outcome.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    if outcome.task.suite is not None:
        render_suite_results(console, outcome.results)
    else:
        st = outcome.task.settings
        render_eval(console, outcome.results, f"{outcome.results[0].num_prompts} prompts x {st.k} samples · "
                                              f"T={st.temperature} · seed {st.seed}")
    console.print("wrote " + " and ".join(str(p) for p in outcome.written), markup=False, soft_wrap=True)


def render_eval(out: Console, results: list[EvalResult], title: str) -> None:
    """One column per model; with several, a change column after each model but the first."""
    summaries = [r.summary(rates=True) for r in results]
    keys: list[str] = []
    for s in summaries:
        keys += [k for k in s if k != "label" and k not in keys]
    caption = f"Δ: change from {results[0].label}" if len(results) > 1 else None
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    table.add_column("metric", no_wrap=True)
    for i, r in enumerate(results):
        table.add_column(r.label, justify="right", overflow="fold")
        if i:
            table.add_column("Δ", justify="right", no_wrap=True)
    for key in keys:
        cells = []
        first = summaries[0].get(key)
        for i, s in enumerate(summaries):
            value = s.get(key)
            cells.append(_fmt_metric(key, value))
            if i:
                delta = value - first if isinstance(value, float) and isinstance(first, float) else None
                cells.append("" if delta is None else f"{100 * delta:+.1f}pp" if key.endswith("/rate")
                             else f"{delta:+.4f}")
        table.add_row(key, *cells)
    print_table(out, table)


def _pct1(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render_suite_results(console: Console, results: list[EvalResult]) -> None:
    """`grpo eval --suite`: one row per model, accuracy with its 95% Wilson interval, change from the first."""
    first = results[0]
    k = first.k
    temperature = first.settings.temperature
    title = f"{first.suite}: {first.num_prompts} problems, " + (
        "greedy pass@1" if temperature == 0 else f"{k} samples at T={temperature}")
    table = Table(title=title, title_justify="left")
    table.add_column("model", justify="left", overflow="fold")
    table.add_column("accuracy", justify="right", overflow="fold")
    table.add_column("95% CI", justify="right", overflow="fold")
    if k > 1:
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("no answer", justify="right")
    # Answers that ran to the token limit are where an evaluation's time goes, and are usually wrong.
    table.add_column(f"cut at {first.settings.max_new_tokens} tokens", justify="right")
    if len(results) > 1:
        table.add_column("Δ accuracy", justify="right")
    for r in results:
        s = r.summary()
        lo, hi = s["ci95"]
        cells = [r.label, _pct1(s["accuracy"]), f"{100 * lo:.1f}–{100 * hi:.1f}%"]
        if k > 1:
            cells.append(_pct1(s.get(f"pass@{k}")))
        cells.append(_pct1(s["no_answer_rate"]))
        cells.append(_pct1(s.get("truncation_rate")))
        if len(results) > 1:
            cells.append("" if r is first else f"{100 * (r.accuracy - first.accuracy):+.1f}pp")
        table.add_row(*cells)
    print_table(console, table)
    cut = max((r.summary().get("truncation_rate") or 0.0 for r in results), default=0.0)
    if cut >= 0.1:
        console.print(f"note: {100 * cut:.0f}% of answers ran to the {first.settings.max_new_tokens}-token limit "
                      "without finishing; they take the most time and usually score wrong: raise --max-new-tokens "
                      "if they were still reasoning, or look at them in the completions file if they loop",
                      markup=False, soft_wrap=True)
