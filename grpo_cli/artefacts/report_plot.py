"""report.png: the curves of a run, drawn so that each panel explains itself.

Rules the picture keeps: every y axis is labelled; legends sit below their panel, never over a curve; a
metric that never changed is a line of text, not a panel (a constant learning rate); a nearly flat
metric is not blown up to fill its axis (lengths start at 0, other axes span at least a tenth of the
value); few points get markers; the held-out before/after scores get a panel; tool runs plot `tools/*`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.artefacts.report_data import RunData, num, reward_keys, series, task_keys

WIDTH_IN, ROW_IN, DPI = 12, 4, 100  # 1200 px wide, 400 px per row of three panels
FEW_POINTS = 30  # up to this many logged points per curve get visible markers
HELD_OUT_KEYS = ("pass@1", "accuracy", "reward/mean")


@dataclass
class Curve:
    key: str
    label: str
    records: str = "train"  # which records: train, evals, tasks
    style: dict[str, Any] = field(default_factory=dict)


@dataclass
class Panel:
    title: str
    left: list[Curve]
    left_label: str
    right: list[Curve] = field(default_factory=list)
    right_label: str = ""
    limits: tuple[float, float] | None = None  # for share-like metrics (0..1)
    right_limits: tuple[float, float] | None = None
    from_zero: bool = False  # lengths and counts: the axis starts at 0
    keep_constants: bool = False  # rewards: a flat reward is a line beside the others, not a footnote


def _values(run: RunData, curve: Curve) -> tuple[list[int], list[float]]:
    return series(getattr(run, curve.records), curve.key)


def _constant(values: list[float]) -> float | None:
    """The value when every logged value is the same (and there are at least two), else None."""
    finite = [v for v in values if not math.isnan(v)]
    if len(finite) < 2:
        return None
    lo, hi = min(finite), max(finite)
    return finite[0] if hi - lo <= 1e-12 * max(1.0, abs(hi)) else None


def _split_constants(run: RunData, curves: list[Curve], constants: dict[str, float], keep: bool = False) -> list[Curve]:
    """Curves with values; a constant one goes to `constants` (shown as text) unless `keep`."""
    kept = []
    for c in curves:
        _, values = _values(run, c)
        if all(math.isnan(v) for v in values):
            continue
        value = _constant(values)
        if value is not None and c.records == "train" and not keep:
            constants[c.label] = value
        else:
            kept.append(c)
    return kept


def _panels(run: RunData) -> list[Panel]:
    rewards = [Curve(k, k.split("/")[1]) for k in reward_keys(run.train)]
    total = Curve("reward", "total", style={"color": "black", "linewidth": 3.0, "alpha": 0.45})
    extra = [Curve("eval_reward", "eval (total)", "evals", {"linestyle": ":", "marker": "s", "color": "black"})]
    extra += [Curve(k, k.removeprefix("task/"), "tasks", {"linestyle": "-.", "marker": "D"}) for k in task_keys(run)]
    panels = [
        Panel("reward (total and per function)", [total, *rewards, *extra], "mean reward per completion",
              keep_constants=True),
        Panel("reward spread", [Curve("reward_std", "reward std")], "std within a group",
              [Curve("frac_reward_zero_std", "groups with zero std")], "share of groups", right_limits=(-0.02, 1.02)),
        Panel("completions", [Curve("completions/mean_length", "mean length")], "tokens",
              [Curve("completions/clipped_ratio", "clipped (hit max length)")], "share of completions",
              right_limits=(-0.02, 1.02), from_zero=True),
        Panel("KL and entropy", [Curve("kl", "KL to reference")], "KL", [Curve("entropy", "entropy")],
              "entropy (nats)"),
        Panel("learning rate", [Curve("learning_rate", "learning rate")], "learning rate", from_zero=True),
        Panel("loss and grad norm", [Curve("loss", "loss")], "loss", [Curve("grad_norm", "grad norm")], "grad norm"),
    ]
    if any(k.startswith("tools/") for r in run.train for k in r):
        panels.append(Panel("tool calls", [Curve("tools/call_frequency", "calls per completion")],
                            "calls per completion", [Curve("tools/failure_frequency", "failed calls")],
                            "share of calls that failed", right_limits=(-0.02, 1.02), from_zero=True))
    if any(k.startswith("dynamic_sampling/") for r in run.train for k in r):  # sampling.dynamic
        panels.append(Panel("dynamic sampling", [Curve("dynamic_sampling/dropped_groups", "dropped groups"),
                                                 Curve("dynamic_sampling/rounds", "generation rounds")],
                            "groups / rounds per batch",
                            [Curve("dynamic_sampling/zero_std_trained", "zero-std groups trained")],
                            "share of trained groups", right_limits=(-0.02, 1.02), from_zero=True))
    if any(k.startswith("sampling/") for r in run.train for k in r):  # vLLM's importance-sampling correction
        panels.append(Panel("vLLM sampler vs trainer", [
            Curve("sampling/sampling_logp_difference/mean", "log-prob gap (mean)"),
            Curve("sampling/sampling_logp_difference/max", "log-prob gap (max)")], "nats per token",
            [Curve("sampling/importance_sampling_ratio/mean", "IS ratio (mean)")], "importance-sampling ratio",
            from_zero=True, keep_constants=True))
    return panels


def _held_out(run: RunData) -> list[tuple[str, float | None, float | None]]:
    """(metric, before, after) for the held-out headline scores in the manifest."""
    rows = {key: (num(before), num(after)) for key, before, after in run.manifest.held_out()}
    keys = [k for k in rows if k in HELD_OUT_KEYS or k.startswith("pass@")]
    primary = rows["pass@1"][0] if "pass@1" in rows else None
    keys += [k for k in rows if k.endswith("/mean") and k not in keys and "length" not in k
             and rows[k][0] != primary][:3]  # another reward's mean; not pass@1 again
    return [(k, *rows[k]) for k in keys if rows[k][0] is not None]


def _draw_curves(ax: Any, run: RunData, curves: Sequence[Curve], first_colour: int, **style: Any) -> int:
    drawn = 0
    for c in curves:
        steps, values = _values(run, c)
        if all(math.isnan(v) for v in values):
            continue
        few = len(values) <= FEW_POINTS
        look = {"color": f"C{(first_colour + drawn) % 10}", "linewidth": 1.6, "marker": "o",
                "markersize": 5 if few else 0}
        ax.plot(steps, values, label=c.label, **{**look, **style, **c.style})
        drawn += 1
    return drawn


def _sensible_range(ax: Any, run: RunData, curves: Sequence[Curve], from_zero: bool) -> None:
    """Do not magnify noise: lengths start at 0; any axis spans at least a tenth of its values' size."""
    values = [v for c in curves for v in _values(run, c)[1] if not math.isnan(v)]
    if not values:
        return
    lo, hi = min(values), max(values)
    if from_zero and lo >= 0:
        ax.set_ylim(0, hi * 1.15 if hi > 0 else 1)
        return
    span = max(hi - lo, 0.1 * max(abs(lo), abs(hi)), 1e-12)
    mid = (lo + hi) / 2
    ax.set_ylim(mid - span * 0.6, mid + span * 0.6)


def _draw_panel(ax: Any, run: RunData, panel: Panel, constants: dict[str, float]) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(panel.title, fontsize=11)
    ax.grid(alpha=0.3)
    left = _split_constants(run, panel.left, constants, panel.keep_constants)
    right = _split_constants(run, panel.right, constants, panel.keep_constants)
    left_label, limits = panel.left_label, panel.limits
    if not left:  # only the right-hand metric was logged (entropy without KL): it takes the panel
        left, right, left_label, limits = right, [], panel.right_label, panel.right_limits
        ax.set_title(panel.title.split(" and ")[-1], fontsize=11)
    elif not right and panel.right and " and " in panel.title:
        ax.set_title(panel.title.split(" and ")[0], fontsize=11)
    drawn = _draw_curves(ax, run, left, 0)
    ax.set_ylabel(left_label, fontsize=9)
    if limits:
        ax.set_ylim(*limits)
    else:
        _sensible_range(ax, run, left, panel.from_zero)
    handles, labels = ax.get_legend_handles_labels()
    if right:
        twin = ax.twinx()
        _draw_curves(twin, run, right, drawn, linestyle="--")
        twin.set_ylabel(panel.right_label + " (dashed)", fontsize=9)
        twin.set_ylim(*panel.right_limits) if panel.right_limits else _sensible_range(twin, run, right, False)
        h2, l2 = twin.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    _events(ax, run, label=panel.title.startswith("reward ("))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    ax.set_xlabel("step", fontsize=9)
    if len(handles) > 1 or right:  # below the axes: never over a curve
        ax.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
                  frameon=False)


def _events(ax: Any, run: RunData, label: bool) -> None:
    for e in run.events:
        if num(e.get("step")) is not None:
            ax.axvline(float(e["step"]), color="red" if e.get("action") == "stop" else "orange", alpha=0.6,
                       linewidth=1)
            if label:
                ax.text(float(e["step"]), 0.98, f" {e.get('guard')}", transform=ax.get_xaxis_transform(),
                        rotation=90, va="top", fontsize=7, color="grey")


def _draw_held_out(ax: Any, rows: list[tuple[str, float | None, float | None]]) -> None:
    """Grouped bars: each held-out score before and after training, with its value written on the bar."""
    ax.set_title("held-out evaluation (before → after training)", fontsize=11)
    width = 0.38
    for i, (_, before, after) in enumerate(rows):
        for j, (value, colour, name) in enumerate(((before, "C7", "before"), (after, "C2", "after"))):
            if value is None:
                continue
            x = i + (j - 0.5) * width
            ax.bar(x, value, width, color=colour, label=name if i == 0 else None)
            ax.text(x, value, f"{value:.3f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [k for k, _, _ in rows], fontsize=8)
    top = max([v for _, b, a in rows for v in (b, a) if v is not None] + [0.0])
    ax.set_ylim(0, max(1.0, top * 1.15) if top <= 1.0 else top * 1.15)
    ax.set_ylabel("score (higher is better)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)


def _fmt(value: float) -> str:
    return f"{value:.3g}" if value != 0 and abs(value) < 0.01 else f"{value:g}"


def plot(run: RunData, path: Path) -> None:
    """A PNG 1200 px wide (400 px per row of three panels) of the curves that matter first."""
    fig = figure(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")


def figure(run: RunData) -> Any:
    """The report's matplotlib Figure (drawn, not saved)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    constants: dict[str, float] = {}
    panels = [p for p in _panels(run) if _split_constants(run, p.left + p.right, constants, p.keep_constants)]
    held_out = _held_out(run)
    count = len(panels) + bool(held_out)
    rows = max(1, math.ceil(count / 3))
    fig = Figure(figsize=(WIDTH_IN, ROW_IN * rows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = [ax for row in fig.subplots(rows, 3, squeeze=False) for ax in row]
    for ax, panel in zip(axes, panels, strict=False):
        _draw_panel(ax, run, panel, constants)
    if held_out:
        _draw_held_out(axes[len(panels)], held_out)
    for ax in axes[count:]:
        ax.set_axis_off()
    steps = [int(r["step"]) for r in run.train if num(r.get("step")) is not None]
    if steps:  # one x range for every curve panel, so the curves line up
        lo, hi = min(steps), max(steps)
        pad = max(1.0, (hi - lo) * 0.04)
        for ax in axes[:len(panels)]:
            ax.set_xlim(lo - pad, hi + pad)
    if not panels:
        axes[0].text(0.5, 0.5, "no values logged", ha="center", va="center", transform=axes[0].transAxes)
    m = run.manifest
    status = f" — {m.status} at step {m.global_step}" if m.status else ""
    events = f" — {len(run.events)} health event(s)" if run.events else ""
    title = f"{run.output_dir.name or run.output_dir}{status}{events}"
    if constants:
        title += "\nconstant over the run: " + ", ".join(f"{k} {_fmt(v)}" for k, v in constants.items())
    fig.suptitle(title, fontsize=12)
    fig.canvas.draw()  # lay out now: callers may measure where legends and axes ended up
    return fig
