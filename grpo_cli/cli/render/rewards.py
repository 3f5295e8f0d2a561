"""Rendering of the dry runs: `grpo check-rewards` and `grpo check-tools`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grpo_cli.cli.render.tables import print_table
from grpo_cli.terminal_text import visible

if TYPE_CHECKING:
    from grpo_cli.checking.rewards import CheckReport
    from grpo_cli.checking.stats import RewardResult
    from grpo_cli.checking.tools import DryRun


def _fmt_score(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _preview(text: str, width: int = 32) -> str:
    flat = visible(text.replace("\n", "⏎"))  # a generated completion's ESC[2J is shown, not obeyed
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def render_check_report(out: Console, report: CheckReport) -> None:
    """The rows × rewards table, per-reward statistics, correlations, notes and the verdict."""
    if not out.is_terminal and out.width < 140:  # piped or captured: no terminal to fit, keep columns readable
        out = Console(file=out.file, width=140, highlight=False, force_terminal=False, no_color=out.no_color)
    names = [r.name for r in report.rewards]
    errors = {r.name: {i for _, idx in r.problems.values() for i in idx} for r in report.rewards}
    source = f"probes written as {report.probe_format}" if report.probe_format else report.source
    out.print(escape(f"{len(report.samples)} completions ({source}) in {report.groups} groups"), soft_wrap=True)
    if report.source == "probes":
        _render_probe_table(out, report, errors)
    else:
        _render_sample_table(out, report, errors)
    _render_reward_stats(out, report)
    if len(names) > 1:
        corr = Table(title="correlation between rewards", title_justify="left")
        corr.add_column("")
        for name in names:
            corr.add_column(name, justify="right")
        for a in names:
            corr.add_row(a, *[_fmt_score(report.correlation[a][b], 2) for b in names])
        print_table(out, corr)
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


def _render_sample_table(out: Console, report: CheckReport, errors: dict[str, set[int]]) -> None:
    """One row per completion (given or generated: each is its own text)."""
    scores = Table()
    scores.add_column("row", justify="right")
    scores.add_column("completion")
    scores.add_column("text", no_wrap=True, overflow="ellipsis", max_width=32)
    for r in report.rewards:
        scores.add_column(escape(r.name), justify="right")
    scores.add_column("total", justify="right", style="bold")
    last_group = None
    for i, s in enumerate(report.samples):
        cells = ["[red]ERR[/]" if i in errors[r.name] else _fmt_score(r.values[i]) for r in report.rewards]
        if last_group is not None and s.group != last_group:
            scores.add_section()
        last_group = s.group
        row = "" if s.row is None else str(s.row)
        scores.add_row(row, s.probe, escape(_preview(s.text)), *cells, _fmt_score(report.totals[i]))
    print_table(out, scores)


def _spread(values: list[float | None], bad: bool) -> str:
    """One cell for a probe over its rows: the score when every row agrees, else its range."""
    if bad:
        return "[red]ERR[/]"
    got = [v for v in values if v is not None]
    if not got:
        return "—"
    lo, hi = min(got), max(got)
    text = _fmt_score(lo) if hi - lo <= 1e-12 else f"{_fmt_score(lo)}–{_fmt_score(hi)}"
    return text + (" (some —)" if len(got) < len(values) else "")


def _render_probe_table(out: Console, report: CheckReport, errors: dict[str, set[int]]) -> None:
    """One row per probe over every sampled data row (they agree for most rewards: 8 rows x 7 probes were 56
    near-identical lines); `--json` keeps every completion."""
    probes: dict[str, list[int]] = {}
    for i, s in enumerate(report.samples):
        probes.setdefault(s.probe, []).append(i)
    rows = len({s.group for s in report.samples})
    table = Table(title=f"score per probe over {rows} data rows (a range where rows differ; --json lists every "
                        "completion)", title_justify="left")
    table.add_column("probe")
    table.add_column("example", no_wrap=True, overflow="ellipsis", max_width=32)
    for r in report.rewards:
        table.add_column(escape(r.name), justify="right")
    table.add_column("total", justify="right", style="bold")
    for probe, idx in probes.items():
        cells = [_spread([r.values[i] for i in idx], any(i in errors[r.name] for i in idx)) for r in report.rewards]
        table.add_row(probe, escape(_preview(report.samples[idx[0]].text)), *cells,
                      _spread([report.totals[i] for i in idx], False))
    print_table(out, table)


def _verdict(report: CheckReport, reward: RewardResult) -> str:
    """One reward's verdict: its violations by kind, or a pass with what the probes showed."""
    kinds = sorted({v.kind for v in report.violations if v.reward == reward.name})
    if kinds:
        return f"[red]✗ {', '.join(kinds)}[/]"
    if report.source != "probes":
        return "[green]✓ pass[/]"

    def mean(probe: str) -> float | None:
        got = [v for v, s in zip(reward.values, report.samples, strict=True) if s.probe == probe and v is not None]
        return sum(got) / len(got) if got else None

    ref, wrong = mean("reference"), mean("wrong")
    if ref is None or wrong is None:
        return "[green]✓ pass[/]"
    return f"[green]✓ pass[/] (reference {_fmt_score(ref)}, wrong {_fmt_score(wrong)})"


def _render_reward_stats(out: Console, report: CheckReport) -> None:
    """Per-reward statistics of check-rewards, then the weighted total."""
    stats = Table(title="per reward", title_justify="left")
    for col in ("reward", "weight", "mean", "std", "min", "max", "None", "errors", "ms/call", "zero-std", "verdict"):
        stats.add_column(col, justify="left" if col in ("reward", "verdict") else "right", no_wrap=col == "reward")
    for r in report.rewards:
        d = r.to_dict()
        stats.add_row(escape(r.name), f"{r.weight:g}", *(_fmt_score(d[k]) for k in ("mean", "std", "min", "max")),
                      str(d["none"]), str(r.errors) if not r.errors else f"[red]{r.errors}[/]",
                      _ms(d["seconds_per_call"]), _pct(r.zero_std), _verdict(report, r))
    from grpo_cli.checking import describe

    total = describe([t for t in report.totals if t is not None])
    stats.add_section()
    stats.add_row("[bold]total[/]", "", _fmt_score(total["mean"]), _fmt_score(total["std"]), _fmt_score(total["min"]),
                  _fmt_score(total["max"]), "", "", "", _pct(report.frac_zero_std), "")
    print_table(out, stats)
    out.print("total = weighted sum of the rewards (None counts 0, as in TRL; — when every reward skipped it); "
              f"groups with zero std (TRL's frac_reward_zero_std): {_pct(report.frac_zero_std)} of {report.groups}",
              soft_wrap=True)


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{1000 * seconds:.3g}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def render_tool_dry_run(out: Console, report: DryRun) -> None:
    """check-tools: schemas, the prompt the model sees, every call, every episode, then flags and the verdict."""
    for name, schema in report.schemas.items():
        out.print(f"[bold]{escape(name)}[/] as the model sees it:")
        out.print_json(json.dumps(schema))
    for name, error in report.schema_errors.items():
        out.print(f"[red]✗ {escape(name)}:[/] transformers cannot build its JSON schema: {escape(error)}",
                  soft_wrap=True)
    if report.prompt_preview:
        out.print("[bold]first prompt, rendered with the tools:[/]")
        out.print(escape(visible(report.prompt_preview)), soft_wrap=True)
    if report.parse_check:
        out.print(f"[green]✓ tool-call parsing[/] {escape(report.parse_check)}", soft_wrap=True)
    calls = Table(title="tool calls", title_justify="left")
    for col in ("tool", "arguments", "ms", "result / error"):
        calls.add_column(col, justify="right" if col == "ms" else "left")
    for c in report.calls + [c for e in report.episodes for c in e.calls]:
        outcome = f"[red]{'TIMEOUT' if c.timeout else 'ERROR'}[/] {escape(visible(c.error))}" if c.error \
            else escape(visible(c.result))  # a tool's output, shown and not obeyed
        tool = f"{c.environment}.{c.tool}" if c.environment else c.tool
        calls.add_row(escape(tool), escape(json.dumps(c.arguments, default=str)), f"{1000 * c.seconds:.3g}", outcome)
    print_table(out, calls)
    for e in report.episodes:
        if e.error:  # the episode stopped there: no "reset -> ''" before a failed reset
            out.print(f"[bold]episode[/] {escape(e.environment)}: [red]{escape(e.error)}[/]", soft_wrap=True)
            continue
        out.print(f"[bold]episode[/] {escape(e.environment)}: reset -> {escape(repr(e.observation))}; rewards "
                  + ", ".join(f"{escape(k)}={escape(str(v))}" for k, v in e.rewards.items()), soft_wrap=True)
    for note in report.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if report.ok:
        out.print(f"[green]✓ {len(report.schemas)} tool(s) ready[/]")
        return
    for flag in report.flags:
        out.print(f"[bold red]✗[/] {escape(flag)}", soft_wrap=True)
