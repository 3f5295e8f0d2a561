"""Every rich table and message layout of the CLI, in one place, so the verbs stay thin and notebooks can reuse it."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def render_preflight(console: Console, pf: Any, *, as_json: bool = False) -> None:
    """Print the plan of a valid recipe and its warnings."""
    if as_json:
        console.print_json(json.dumps({"ok": pf.ok, "plan": pf.plan, "warnings": pf.warnings}))
        return
    title = f"{pf.recipe.source or 'recipe'} is valid"
    table = Table(title=title, show_header=False, title_justify="left", title_style="bold green")
    table.add_column("what", style="bold")
    table.add_column("plan")
    for key, value in pf.plan.items():
        table.add_row(key, str(value))
    console.print(table)
    for warning in pf.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def _fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def render_eval_pair(console: Console, before: Any, after: Any) -> None:
    """Side-by-side held-out scores before and after training."""
    a, b = before.summary(), (after.summary() if after else {})
    suite = a.get("suite")
    title = f"{suite} ({a.get('decoding')})" if suite else "held-out evaluation (sampling)"
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    for key, value in a.items():
        if key in ("label", "suite", "model", "source", "decoding") or (suite and value is None):
            continue
        other = b.get(key)
        if key == "ci95":  # a suite's 95% interval, as percentages
            table.add_row("95% CI", *(f"{100 * v[0]:.1f}–{100 * v[1]:.1f}%" if v else "-" for v in (value, other)), "")
            continue
        change = other - value if isinstance(value, float) and isinstance(other, float) else None
        table.add_row(key, _fmt_value(value), _fmt_value(other), (f"{change:+.4f}" if change is not None else ""))
    console.print(table)


def render_train_result(console: Console, result: Any) -> None:
    """The end-of-run summary: first vs last logging window, eval before/after, where things are."""
    if result.data_stats:
        names = {"train_rows": "training rows", "eval_rows": "eval rows", "train_dropped_long": "dropped (too long)",
                 "train_truncated": "truncated", "train_rows_without_answer": "rows without an answer"}
        parts = [f"{v} {names[k]}" for k, v in result.data_stats.items() if k in names]
        if parts:
            console.print("data: " + ", ".join(parts))
    if result.summary:
        from grpo_cli.training.run import summary_window

        window = summary_window(sum(1 for r in result.metrics if "reward" in r))
        table = Table(title=f"training: first vs last logging window (mean of {window} logging step"
                            f"{'s' if window != 1 else ''} each)", title_justify="left")
        table.add_column("metric")
        table.add_column("first", justify="right")
        table.add_column("last", justify="right")
        table.add_column("change", justify="right")
        for key, first, last in result.summary:
            table.add_row(key, f"{first:.4f}", f"{last:.4f}", f"{last - first:+.4f}")
        console.print(table)
    if result.eval_before is not None:
        render_eval_pair(console, result.eval_before, result.eval_after)
    style = {"completed": "green", "interrupted": "yellow", "stopped": "red"}.get(result.status, "white")
    console.print(f"[{style}]{result.status}[/] at step {result.global_step}; outputs in {result.output_dir}")
    if result.message:
        console.print(result.message, markup=False)


def _fmt_metric(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{100 * value:.1f}%" if key.endswith("/rate") else f"{value:.4f}"
    return str(value)


def render_eval_outcome(console: Console, outcome: Any) -> None:
    """`grpo eval`: the suite table or the per-model reward table, notes, and where the results went."""
    for note in outcome.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    if outcome.suite:
        render_suite_results(console, outcome.results)
    else:
        st = outcome.settings
        render_eval(console, outcome.results, f"{outcome.results[0].num_prompts} prompts x {st.k} samples · "
                                              f"T={st.temperature} · seed {st.seed}")
    console.print("wrote " + " and ".join(str(p) for p in outcome.written), markup=False, soft_wrap=True)


def render_eval(out: Console, results: list[Any], title: str) -> None:
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
    out.print(table)


def render_memory_plan(console: Console, loaded: Any, plan: Any, why: str | None) -> None:
    """The per-GPU memory table of `grpo memory`, or why there is none."""
    if plan is None:
        console.print(f"[yellow]no memory plan:[/] {escape(why or 'unknown')}", soft_wrap=True)
        return
    title = (f"memory per GPU: {escape(loaded.model.name_or_path)}, profile {loaded.launch.profile}, "
             f"{plan.world_size} process{'es' if plan.world_size != 1 else ''}")
    table = Table(title=title, title_justify="left")
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("how", overflow="fold")
    rows = plan.render_rows()
    for i, (name, gib, note) in enumerate(rows):
        style = "bold" if i == len(rows) - 1 else None
        table.add_row(escape(name), gib, escape(note), style=style, end_section=i == len(rows) - 2)
    console.print(table)
    console.print(f"config: {plan.source}", markup=False, soft_wrap=True)
    for note in plan.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    if plan.warning:
        console.print(f"[yellow]warning:[/] {escape(plan.warning)}", soft_wrap=True)


def render_report_written(console: Console, run: Any, paths: Any) -> None:
    """One line on the run `grpo report` plotted, its health events, and where the files went."""
    from grpo_cli.training.report import summarize_run

    summary = summarize_run(run)
    final, best = summary.final.means.get("reward"), summary.best
    line = f"{len(run.train)} training logs"
    if final is not None:
        line += f"; final reward {final:.4f}"
    if best is not None and best.means.get("reward") is not None:
        line += f", best {best.means['reward']:.4f} (step {best.last_step})"
    console.print(line, markup=False)
    if run.events:
        console.print(f"[yellow]{len(run.events)} health event(s):[/] "
                      + ", ".join(f"{e.get('guard')} at step {e.get('step')}" for e in run.events))
    console.print(f"wrote {paths.image} and {paths.summary}", markup=False, soft_wrap=True)


def _fmt_score(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _preview(text: str, width: int = 32) -> str:
    flat = text.replace("\n", "⏎")
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def render_check_report(out: Console, report: Any) -> None:
    """The rows × rewards table, per-reward statistics, correlations, notes and the verdict."""
    if not out.is_terminal and out.width < 140:  # piped or captured: no terminal to fit, keep columns readable
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
        cells = ["[red]ERR[/]" if i in errors[r.name] else _fmt_score(r.values[i]) for r in report.rewards]
        new_group = last_group is not None and s.group != last_group
        if new_group:
            scores.add_section()
        last_group = s.group
        row = "" if s.row is None else str(s.row)
        scores.add_row(row, s.probe, escape(_preview(s.text)), *cells, _fmt_score(report.totals[i]))
    out.print(scores)

    _render_reward_stats(out, report)
    if len(names) > 1:
        corr = Table(title="correlation between rewards", title_justify="left")
        corr.add_column("")
        for name in names:
            corr.add_column(name, justify="right")
        for a in names:
            corr.add_row(a, *[_fmt_score(report.correlation[a][b], 2) for b in names])
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


def _render_reward_stats(out: Console, report: Any) -> None:
    """Per-reward statistics of check-rewards, then the weighted total."""
    stats = Table(title="per reward", title_justify="left")
    for col in ("reward", "weight", "mean", "std", "min", "max", "None", "errors", "ms/call", "zero-std"):
        stats.add_column(col, justify="left" if col == "reward" else "right", no_wrap=col == "reward")
    for r in report.rewards:
        d = r.to_dict()
        stats.add_row(escape(r.name), f"{r.weight:g}", *(_fmt_score(d[k]) for k in ("mean", "std", "min", "max")),
                      str(d["none"]), str(r.errors) if not r.errors else f"[red]{r.errors}[/]",
                      _ms(d["seconds_per_call"]), _pct(r.zero_std))
    from grpo_cli.rewards.check import describe

    total = describe([t for t in report.totals if t is not None])
    stats.add_section()
    stats.add_row("[bold]total[/]", "", _fmt_score(total["mean"]), _fmt_score(total["std"]), _fmt_score(total["min"]),
                  _fmt_score(total["max"]), "", "", "", _pct(report.frac_zero_std))
    out.print(stats)
    out.print("total = weighted sum of the rewards (None counts 0, as in TRL; — when every reward skipped it); "
              f"groups with zero std (TRL's frac_reward_zero_std): {_pct(report.frac_zero_std)} of {report.groups}",
              soft_wrap=True)


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{1000 * seconds:.3g}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


_STATUS = {"ok": "[green]ok[/]", "missing": "[red]missing[/]", "incompatible": "[red]incompatible[/]",
           "absent": "[dim]not installed[/]"}


def render_doctor(console: Console, report: Any, *, as_json: bool = False) -> None:
    """`grpo doctor`: one row per component, then devices, notes and the problems with their fixes."""
    if as_json:
        console.print_json(json.dumps(report.as_dict()))
        return
    if not console.is_terminal and console.width < 120:  # piped or captured: keep the columns readable
        console = Console(file=console.file, width=120, highlight=False, no_color=console.no_color)
    table = Table(title="grpo doctor", show_lines=False)
    for col in ("component", "installed", "supported", "status"):
        table.add_column(col, no_wrap=True)
    table.add_column("where the supported range comes from", overflow="fold")
    table.add_row("torch build", escape(report.torch), "", "", "")
    for c in report.checks:
        status = _STATUS[c.status] + ("" if c.needed or c.status != "incompatible" else " (unused)")
        table.add_row(c.name, escape(c.found or "-"), escape(c.wants), status, escape(c.source))
    console.print(table)
    for d in report.devices:
        console.print(f"cuda:{d.index} {escape(d.name)}, {d.memory_gb:.1f} GiB, sm_{d.capability[0]}{d.capability[1]}, "
                      f"bf16 {'yes' if d.bf16 else 'no'}")
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    for problem in report.problems:
        console.print(f"[bold red]problem:[/] {escape(problem)}", soft_wrap=True)
    console.print("[green]ready[/]" if report.ok else f"[red]{len(report.problems)} problem(s)[/]")


def _pct1(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render_suite_results(console: Console, results: list[Any]) -> None:
    """`grpo eval --suite`: one row per model, accuracy with its 95% Wilson interval, change from the first."""
    first = results[0]
    k = first.k
    temperature = first.settings.temperature
    title = f"{first.suite}: {len(first.rows)} problems, " + (
        "greedy pass@1" if temperature == 0 else f"{k} samples at T={temperature}")
    table = Table(title=title, title_justify="left")
    for name, justify in (("model", "left"), ("accuracy", "right"), ("95% CI", "right")):
        table.add_column(name, justify=justify, overflow="fold")
    if k > 1:
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("no answer", justify="right")
    if len(results) > 1:
        table.add_column("Δ accuracy", justify="right")
    for r in results:
        s = r.summary()
        lo, hi = s["ci95"]
        cells = [r.label, _pct1(s["accuracy"]), f"{100 * lo:.1f}–{100 * hi:.1f}%"]
        if k > 1:
            cells.append(_pct1(s.get(f"pass@{k}")))
        cells.append(_pct1(s["no_answer_rate"]))
        if len(results) > 1:
            cells.append("" if r is first else f"{100 * (r.accuracy - first.accuracy):+.1f}pp")
        table.add_row(*cells)
    console.print(table)


def render_samples(console: Console, rows: list[dict[str, Any]], title: str, width: int = 400) -> None:
    """`grpo samples`: one row per completion with its total reward, each reward and its advantage."""
    names: list[str] = []
    for r in rows:
        names += [n for n in (r.get("rewards") or {}) if n not in names]
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("step", justify="right")
    table.add_column("prompt", overflow="fold", ratio=2)
    table.add_column("completion", overflow="fold", ratio=3)
    table.add_column("reward", justify="right")
    for n in names:
        table.add_column(n, justify="right")
    table.add_column("adv.", justify="right")

    def cut(text: Any) -> str:
        text = str(text or "")
        return text if len(text) <= width else text[:width] + " …"

    for r in rows:
        scores = r.get("rewards") or {}
        table.add_row(str(r.get("step")), cut(r.get("prompt")), cut(r.get("completion")), _fmt_value(r.get("reward")),
                      *(_fmt_value(scores.get(n)) for n in names), _fmt_value(r.get("advantage")), style=None)
    console.print(table)


def render_tool_dry_run(out: Console, report: Any) -> None:
    """check-tools: schemas, the prompt the model sees, every call, every episode, then flags and the verdict."""
    for name, schema in report.schemas.items():
        out.print(f"[bold]{escape(name)}[/] as the model sees it:")
        out.print_json(json.dumps(schema))
    for name, error in report.schema_errors.items():
        out.print(f"[red]✗ {escape(name)}:[/] transformers cannot build its JSON schema: {escape(error)}",
                  soft_wrap=True)
    if report.prompt_preview:
        out.print("[bold]first prompt, rendered with the tools:[/]")
        out.print(escape(report.prompt_preview), soft_wrap=True)
    if report.parse_check:
        out.print(f"[green]✓ tool-call parsing[/] {escape(report.parse_check)}", soft_wrap=True)
    calls = Table(title="tool calls", title_justify="left")
    for col in ("tool", "arguments", "ms", "result / error"):
        calls.add_column(col, justify="right" if col == "ms" else "left")
    for c in report.calls + [c for e in report.episodes for c in e.calls]:
        outcome = f"[red]{'TIMEOUT' if c.timeout else 'ERROR'}[/] {escape(c.error)}" if c.error else escape(c.result)
        tool = f"{c.environment}.{c.tool}" if c.environment else c.tool
        calls.add_row(escape(tool), escape(json.dumps(c.arguments, default=str)), f"{1000 * c.seconds:.3g}", outcome)
    out.print(calls)
    for e in report.episodes:
        out.print(f"[bold]episode[/] {escape(e.environment)}: reset -> {escape(repr(e.observation))}; "
                  + (f"[red]{escape(e.error)}[/]" if e.error else
                     "rewards " + ", ".join(f"{escape(k)}={escape(str(v))}" for k, v in e.rewards.items())),
                  soft_wrap=True)
    for note in report.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if report.ok:
        out.print(f"[green]✓ {len(report.schemas)} tool(s) ready[/]")
        return
    for flag in report.flags:
        out.print(f"[bold red]✗[/] {escape(flag)}", soft_wrap=True)


def render_launch_file(console: Console, path: Any, start: str, *, job: str | None = None) -> None:
    """Where a cluster launch file was written and how to start it (or the job it was submitted as)."""
    console.print(f"wrote {path}", markup=False, soft_wrap=True)
    if job:
        console.print(f"submitted as Slurm job {job}; follow it with `squeue -j {job}`", markup=False)
    else:
        console.print(f"start it with: {start}", markup=False, soft_wrap=True)
