"""`grpo report`: the curves and the summary a user looks at first after a run.

Pure functions over the files a run leaves behind (metrics.jsonl, health.jsonl, manifest.json),
so a report can be rebuilt at any time, also for a run that is still going or crashed. Every
metric may be missing or null in any record (TRL logs None when all values were NaN; older
TRL or other settings omit KL or entropy): gaps are drawn as gaps, never as errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.artefacts.report_data import RunData, load_run, num, number_text, reward_keys, series, task_keys
from grpo_cli.artefacts.report_plot import plot
from grpo_cli.artefacts.samples import markdown_samples
from grpo_cli.artefacts.summary import step_span, summary_keys, summary_window, window_mean
from grpo_cli.artefacts.time_check import time_check_markdown
from grpo_cli.artefacts.time_split import time_split_markdown
from grpo_cli.errors import GrpoError
from grpo_cli.paths import check_writable_dir, terminate_as_interrupt, write_atomic
from grpo_cli.tools import stats_markdown

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["RunData", "load_run", "num", "reward_keys", "series", "summarize_run", "task_keys", "write_report"]

REPORT_EXTRA = ("grad_norm", "learning_rate", "tools/call_frequency", "tools/failure_frequency",
                "sample/staleness_max", "perf/rollout_wait_s")  # the last two: async mode only (TRL's names)
ARTEFACTS = ((runs.METRICS, "per-step training logs"), (runs.HEALTH, "health guard events"),
             (runs.MANIFEST, "versions, command, status"), (runs.RECIPE, "the resolved recipe"),
             ("model.safetensors", "final model"), ("adapter_model.safetensors", "final LoRA adapter"),
             ("runs", "TensorBoard logs"))


@dataclass
class ReportPaths:
    """Where a report was written."""

    image: Path
    summary: Path


@dataclass
class Window:
    """Mean of each metric over consecutive logging steps."""

    first_step: int
    last_step: int
    means: dict[str, float | None]


@dataclass
class Summary:
    size: int
    keys: list[str]
    first: Window
    best: Window | None
    final: Window


def _window(records: list[dict[str, Any]], keys: list[str]) -> Window:
    means = {key: window_mean(records, key) for key in keys}
    return Window(int(records[0].get("step", 0)), int(records[-1].get("step", 0)), means)


def summarize_run(run: RunData) -> Summary:
    """First, best (highest mean reward) and final windows of max(1, n // 5) logging steps."""
    logs = run.train
    size = summary_window(len(logs))
    keys = summary_keys(logs, REPORT_EXTRA)
    # Sliding means of the reward from prefix sums: linear in the number of logs, even for long runs.
    sums, counts = [0.0], [0]
    for r in logs:
        v = num(r.get("reward"))
        sums.append(sums[-1] + (v or 0.0))
        counts.append(counts[-1] + (v is not None))
    best_at, best_mean = None, -math.inf
    for i in range(len(logs) - size + 1):
        n = counts[i + size] - counts[i]
        if n and (mean := (sums[i + size] - sums[i]) / n) > best_mean:
            best_at, best_mean = i, mean
    best = _window(logs[best_at:best_at + size], keys) if best_at is not None else None
    return Summary(size, keys, _window(logs[:size], keys), best, _window(logs[-size:], keys))


def _f(value: Any) -> str:
    return number_text(value, missing="–", small=True)


def _steps(w: Window) -> str:
    return step_span(w.first_step, w.last_step)


def render_markdown(run: RunData, summary: Summary, paths: ReportPaths) -> str:
    """The short Markdown summary: status, windows, eval, guard events, artefacts."""
    m, logs = run.manifest, run.train
    last = logs[-1]
    lines = [f"# Run report: {run.output_dir.name or run.output_dir}", ""]
    step = last.get("step") if m.global_step is None else m.global_step
    lines.append(f"- status: **{m.status or 'unknown (no manifest.json)'}** at step {step}"
                 + (f" — {m.message}" if m.message else ""))
    if m.recipe:
        lines.append(f"- recipe: `{m.recipe}`")
    if m.started:
        lines.append(f"- started {m.started}, finished {m.finished or '–'}")
    plural = "s" if len(logs) > 1 else ""
    lines.append(f"- {len(logs)} training log{plural}, steps {logs[0].get('step')}–{last.get('step')}"
                 + (f", {last['time']:.0f} s" if num(last.get("time")) is not None else ""))
    lines += ["", f"## Training (windows of {summary.size} logging step{'s' if summary.size > 1 else ''})", ""]
    if len(logs) == 1 and m.status in (None, "completed"):  # a run shorter than logging_steps: say why the columns
        # agree and the curves are dots (a run a guard or a signal ended has its own reason, in its status)
        lines += ["One training log: first and final are the same step (training.max_steps is not above "
                  "training.logging_steps); set training.logging_steps=1 for curves.", ""]
    cols = [(name, w) for name, w in (("first", summary.first), ("best", summary.best), ("final", summary.final))
            if w is not None]
    lines.append("| metric | " + " | ".join(f"{n} ({_steps(w)})" for n, w in cols) + " |")
    lines.append("|---|" + "---:|" * len(cols))
    for key in summary.keys:
        lines.append(f"| {key} | " + " | ".join(_f(w.means.get(key)) for _, w in cols) + " |")
    if not summary.keys:
        lines.append("| (no metric was logged with a value) |" + " |" * len(cols))
    lines += ["", "Best = the window with the highest mean total reward."
              + ("" if summary.best else " No window has a reward value."), ""]
    lines += time_split_markdown(logs)
    lines += time_check_markdown(m.time_plan, m.step_rates)
    lines += _eval_lines(run) + stats_markdown(run.manifest.tools)  # per-tool table of a run with tools
    lines += _task_lines(run)
    lines += markdown_samples(run.output_dir)
    lines += ["## Health guards", ""]
    if run.events:
        for e in run.events:
            lines.append(f"- step {e.get('step')}: **{e.get('guard')}** ({e.get('action')}) — {e.get('message', '')}")
    elif (run.output_dir / runs.HEALTH).exists():
        lines.append("No guard fired.")
    else:
        lines.append("No guard fired (no health.jsonl).")
    lines += ["", "## Artefacts", "", f"- `{paths.image}`: the curves", f"- `{paths.summary}`: this summary"]
    for name, what in ARTEFACTS:
        if (run.output_dir / name).exists():
            lines.append(f"- `{run.output_dir / name}`: {what}")
    checkpoints = sorted((p for p in run.output_dir.iterdir() if runs.checkpoint_step(p) is not None),
                         key=lambda p: runs.checkpoint_step(p) or 0)
    if checkpoints:
        lines.append(f"- checkpoints: {', '.join(f'`{p}`' for p in checkpoints)}")
    return "\n".join(lines).rstrip() + "\n"


def _eval_lines(run: RunData) -> list[str]:
    lines: list[str] = []
    if run.evals:
        keys = [k for k in ("eval_reward", *reward_keys(run.evals, "eval_"), "eval_frac_reward_zero_std",
                            "eval_completions/mean_length") if any(num(r.get(k)) is not None for r in run.evals)]
        lines += ["## Evaluation during training", "", "| step | " + " | ".join(keys) + " |",
                  "|---:|" + "---:|" * len(keys)]
        for r in run.evals[-5:]:
            lines.append(f"| {r.get('step')} | " + " | ".join(_f(r.get(k)) for k in keys) + " |")
        lines += [f"\n{len(run.evals)} evaluations; the last {min(5, len(run.evals))} are shown.", ""]
    held_out = [row for row in run.manifest.held_out() if row[0] != "label"]
    if run.manifest.eval_before is not None:
        lines += ["## Held-out evaluation (sampling)", "", "| metric | before | after |", "|---|---:|---:|"]
        lines += [f"| {key} | {_f(before)} | {_f(after)} |" for key, before, after in held_out]
        lines.append("")
    return lines


def _task_lines(run: RunData) -> list[str]:
    """The task metric at each evaluation, and the checkpoint kept as best/."""
    keys = task_keys(run)
    if not keys:
        return []
    lines = ["## Task metric", "", "| step | " + " | ".join(keys) + " |", "|---:|" + "---:|" * len(keys)]
    for r in run.tasks[-10:]:
        lines.append(f"| {r.get('step')} | " + " | ".join(_f(r.get(k)) for k in keys) + " |")
    best = run.manifest.best
    if best is not None:
        lines.append(f"\nBest: {best.metric} = {_f(best.value)} at step {best.step}, "
                     f"kept in `{run.output_dir / best.path}`.")
    return [*lines, ""]


def report_paths(output_dir: str | Path, out: str | Path | None = None) -> ReportPaths:
    """OUTPUT_DIR/report.{png,md} by default; `out` names the image (or the .md) and the other sits beside it."""
    if out is None:
        return ReportPaths(Path(output_dir) / runs.REPORT_IMAGE, Path(output_dir) / runs.REPORT_SUMMARY)
    out = Path(out)
    if out.suffix.lower() not in ("", ".png", ".md"):
        raise GrpoError(f"{out} does not end in .png or .md", where="--out",
                        fix="Name the image (report.png) or the summary (report.md); the other is written beside it.")
    if out.suffix.lower() == ".md":
        return ReportPaths(out.with_suffix(".png"), out)
    image = out if out.suffix else out.with_suffix(".png")
    return ReportPaths(image, image.with_suffix(".md"))


def _check_targets(paths: ReportPaths, explicit: bool, force: bool) -> None:
    """A directory in the way, or a file the user named with --out that exists (without --force): refused."""
    where = "--out" if explicit else "OUTPUT_DIR"
    for path in (paths.image, paths.summary):
        if path.is_dir():
            raise GrpoError(f"{path} is a directory, where the report writes a file", where=where,
                            fix="Move that directory aside, or write the report elsewhere with --out FILE.png.")
        if explicit and path.exists() and not force:
            raise GrpoError(f"{path} already exists; refusing to overwrite it", where=where,
                            fix="Choose another --out, or pass --force to replace it.")
    check_writable_dir(paths.image.parent, where)


def write_report(output_dir: str | Path, out: str | Path | None = None, *, force: bool = False) -> ReportPaths:
    """Write the PNG and the Markdown summary of a run, each whole or not at all; GrpoError when it has no
    metrics, or when `out` names files that exist (unless `force`)."""
    import os
    import tempfile

    run = load_run(output_dir)
    paths = report_paths(output_dir, out)
    _check_targets(paths, out is not None, force)
    text = render_markdown(run, summarize_run(run), paths)
    paths.image.parent.mkdir(parents=True, exist_ok=True)  # --out into a new directory (probed writable above)
    with terminate_as_interrupt():
        fd, tmp = tempfile.mkstemp(prefix=f".{paths.image.name}.", suffix=".tmp", dir=paths.image.parent)
        os.close(fd)
        try:
            plot(run, Path(tmp))
            os.chmod(tmp, 0o644)
            os.replace(tmp, paths.image)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    write_atomic(paths.summary, text)
    return paths


def report_after_training(output_dir: str | Path, console: Console | None = None) -> ReportPaths | None:
    """For `grpo train`: write the report, but never let a report problem fail a finished run."""
    try:
        paths = write_report(output_dir)
    except Exception as exc:  # noqa: BLE001 - a report is a convenience; the run's outputs are what matter
        if console is not None:
            console.print(f"[yellow]report not written:[/] {exc}", soft_wrap=True)
        return None
    if console is not None:
        console.print(f"report: {paths.summary} and {paths.image}", markup=False, soft_wrap=True)
    return paths
