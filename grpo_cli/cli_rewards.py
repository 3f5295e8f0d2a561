"""`grpo check-rewards`: a dry run of the recipe's rewards; registered on the shared `app` from cli.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from grpo_cli.cli import RECIPE_EPILOG, OverridesArg, RecipeArg, _load, app, console, run_guarded

CHECK_EPILOG = (
    RECIPE_EPILOG + " Completions come from built-in probes for each sampled row (reference answer, wrong "
    "answer, empty, tags only, no reasoning, overlong, repeated text), from --completions (JSONL: "
    '{"row": 3, "completion": "..."} or {"prompt": "...", "completion": "...", "answer": "..."}), '
    "or from the recipe's model with --generate. Exit codes: 0 every reward passes, 1 a contract is "
    "violated, 2 bad input. See docs/rewards.md."
)


@app.command("check-rewards", epilog=CHECK_EPILOG)
def check_rewards_command(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    samples: Annotated[int, typer.Option("--samples", "-n", min=1, help="Data rows to sample (spread evenly).")] = 8,
    completions: Annotated[Path | None, typer.Option("--completions", help="Score the completions in this JSONL "
                                                     "file instead of the built-in probes.")] = None,
    generate: Annotated[bool, typer.Option("--generate", help="Sample num_generations completions per prompt "
                                           "from the recipe's model (loads the model).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON document.")] = False,
) -> None:
    """Call every reward exactly as TRL will, on probes or given completions; flag broken or hackable rewards."""

    def body() -> int:
        import datasets
        from transformers.utils import logging as hf_logging

        from grpo_cli.rewards.check import check_rewards

        datasets.disable_progress_bars()  # a dry run: keep the output to the report
        hf_logging.disable_progress_bar()
        loaded = _load(recipe, overrides)
        report = check_rewards(loaded, completions=completions, samples=samples, generate=generate)
        if as_json:
            sys.stdout.write(report.to_json() + "\n")
        else:
            render_report(report)
        return 0 if report.ok else 1

    code = run_guarded(body)
    if code:
        raise typer.Exit(code)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _preview(text: str, width: int = 32) -> str:
    flat = text.replace("\n", "⏎")
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def render_report(report: Any, out: Any = None) -> None:
    """The rows × rewards table, per-reward statistics, correlations, notes and the verdict."""
    from rich.markup import escape
    from rich.table import Table

    out = out or console
    if not out.is_terminal and out.width < 140:  # piped or captured: no terminal to fit, keep columns readable
        from rich.console import Console

        out = Console(file=out.file, width=140, highlight=False, force_terminal=False, no_color=out.no_color)
    names = [r.name for r in report.rewards]
    errors = {r.name: {i for _, idx in r.problems.values() for i in idx} for r in report.rewards}
    source = f"probes written as {report.probe_format}" if report.probe_format else report.source
    out.print(escape(f"{len(report.samples)} completions ({source}) in {report.groups} groups"), soft_wrap=True)
    scores = Table()
    scores.add_column("row", justify="right")
    scores.add_column("completion" if report.source != "probes" else "probe")
    scores.add_column("text", no_wrap=True, overflow="ellipsis", max_width=32)
    for name in names:
        scores.add_column(name, justify="right")
    scores.add_column("total", justify="right", style="bold")
    last_group = None
    for i, s in enumerate(report.samples):
        cells = ["[red]ERR[/]" if i in errors[r.name] else _fmt(r.values[i]) for r in report.rewards]
        new_group = last_group is not None and s.group != last_group
        if new_group:
            scores.add_section()
        last_group = s.group
        row = "" if s.row is None else str(s.row)
        scores.add_row(row, s.probe, escape(_preview(s.text)), *cells, _fmt(report.totals[i]))
    out.print(scores)

    stats = Table(title="per reward", title_justify="left")
    for col in ("reward", "weight", "mean", "std", "min", "max", "None", "errors", "ms/call", "zero-std"):
        stats.add_column(col, justify="left" if col == "reward" else "right", no_wrap=col == "reward")
    for r in report.rewards:
        d = r.to_dict()
        stats.add_row(escape(r.name), f"{r.weight:g}", _fmt(d["mean"]), _fmt(d["std"]), _fmt(d["min"]), _fmt(d["max"]),
                      str(d["none"]), str(r.errors) if not r.errors else f"[red]{r.errors}[/]",
                      _ms(d["seconds_per_call"]), _pct(r.zero_std))
    from grpo_cli.rewards.check_stats import describe

    total = describe([t for t in report.totals if t is not None])
    stats.add_section()
    stats.add_row("[bold]total[/]", "", _fmt(total["mean"]), _fmt(total["std"]), _fmt(total["min"]),
                  _fmt(total["max"]), "", "", "", _pct(report.frac_zero_std))
    out.print(stats)
    out.print("total = weighted sum of the rewards (None counts 0, as in TRL; — when every reward skipped it); "
              f"groups with zero std (TRL's frac_reward_zero_std): {_pct(report.frac_zero_std)} of {report.groups}",
              soft_wrap=True)
    if len(names) > 1:
        corr = Table(title="correlation between rewards", title_justify="left")
        corr.add_column("")
        for name in names:
            corr.add_column(name, justify="right")
        for a in names:
            corr.add_row(a, *[_fmt(report.correlation[a][b], 2) for b in names])
        out.print(corr)
    if report.metrics:
        out.print("metrics logged by rewards: " + ", ".join(f"{k}={v:.3g}" for k, v in report.metrics.items()))
    for note in report.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if report.ok:
        out.print(f"[green]✓ all {len(names)} rewards pass[/] on {len(report.samples)} completions")
        return
    out.print(f"[bold red]✗ {len(report.violations)} violation(s):[/]")
    for v in report.violations:
        out.print(f"  [red]{v.kind}[/] {escape(v.message)}", soft_wrap=True)


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{1000 * seconds:.3g}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"
