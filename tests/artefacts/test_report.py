"""`grpo report`: a fixed-size PNG of the first curves to look at and a Markdown summary with the right numbers."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest

from grpo_cli.artefacts.time_split import PARTS
from tests.conftest import RECIPES, assert_paragraph, not_regular_files, run_cli

DEMO = RECIPES / "demo.yaml"
FAST = ["training.max_steps=4", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header (signature, then the IHDR chunk)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _write_jsonl(path: Path, records: list[dict[str, Any]], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")


@pytest.fixture
def gappy_run(tmp_path: Path) -> Path:
    """Two rewards (one logged only from step 40), null and NaN values, no KL, entropy in some logs,
    no clipped ratio, eval logs, the end-of-training summary, a truncated last line, no manifest."""
    out = tmp_path / "gappy"
    out.mkdir()
    rewards = [0.1, 0.2, None, 0.4, 0.5, 0.9, 0.8, 0.3, math.nan, 0.6]
    records: list[dict[str, Any]] = []
    for i, r in enumerate(rewards, start=1):
        rec: dict[str, Any] = {"step": 10 * i, "time": 3.0 * i, "loss": 0.01 * i, "learning_rate": 1e-5,
                               "reward": r, "rewards/acc/mean": r, "frac_reward_zero_std": 0.5,
                               "completions/mean_length": 20.0 + i}
        if i >= 4:
            rec["rewards/fmt/mean"] = 0.5
        if i % 2:
            rec["entropy"] = 0.3
        records.append(rec)
        if i in (5, 10):
            records.append({"step": 10 * i, "eval_loss": 0.1, "eval_reward": 0.42 if i == 5 else 0.61,
                            "eval_rewards/acc/mean": 0.4})
    records.append({"step": 100, "train_runtime": 31.0, "train_loss": 0.05})
    _write_jsonl(out / "metrics.jsonl", records, tail='{"step": 110, "loss": 0.')
    _write_jsonl(out / "health.jsonl", [{"step": 70, "guard": "entropy", "action": "warn", "metric": "entropy",
                                         "observed": 0.01, "message": "entropy stayed below 0.02. Try: x."}])
    return out


def test_report_of_a_metrics_file_with_gaps_has_the_expected_size_and_numbers(gappy_run: Path) -> None:
    from grpo_cli.artefacts.report import write_report

    paths = write_report(gappy_run)
    assert paths.image == gappy_run / "report.png" and paths.summary == gappy_run / "report.md"
    assert png_size(paths.image) == (1200, 400)  # reward, completions, loss: the rest never changed
    md = paths.summary.read_text()
    # 10 logs -> windows of 2; the null and NaN rewards are left out of the means.
    assert "windows of 2 logging steps" in md and "10 training logs, steps 10–100" in md
    assert "| metric | first (steps 10–20) | best (steps 60–70) | final (steps 90–100) |" in md
    assert "| reward | 0.1500 | 0.8500 | 0.6000 |" in md
    assert "| rewards/acc/mean | 0.1500 | 0.8500 | 0.6000 |" in md
    assert "| rewards/fmt/mean | – | 0.5000 | 0.5000 |" in md  # not logged in the first window
    assert "| entropy | 0.3000 | 0.3000 | 0.3000 |" in md
    assert "clipped_ratio" not in md and "| kl |" not in md  # never logged: no row
    assert "| 100 | 0.6100 | 0.4000 |" in md and "2 evaluations" in md
    assert "- step 70: **entropy** (warn) — entropy stayed below 0.02. Try: x." in md
    assert "status: **unknown (no manifest.json)**" in md
    assert f"`{gappy_run / 'metrics.jsonl'}`" in md and f"`{gappy_run / 'health.jsonl'}`" in md


def test_report_renders_when_no_reward_has_a_value(tmp_path: Path) -> None:
    from grpo_cli.artefacts.report import write_report

    out = tmp_path / "nan"
    out.mkdir()
    _write_jsonl(out / "metrics.jsonl", [{"step": 1, "loss": 0.0, "reward": None, "rewards/nan/mean": None}])
    paths = write_report(out, tmp_path / "elsewhere" / "nan-report.md")
    assert paths.image == tmp_path / "elsewhere" / "nan-report.png"
    assert png_size(paths.image) == (1200, 400)
    md = paths.summary.read_text()
    assert "No window has a reward value." in md and "| loss | 0.0000 | 0.0000 |" in md
    assert "No guard fired (no health.jsonl)." in md


def test_report_without_metrics_is_a_clear_error(tmp_path: Path) -> None:
    missing = run_cli("report", tmp_path)
    assert missing.exit_code == 2 and "no metrics.jsonl" in missing.output and "Traceback" not in missing.output
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "train_runtime": 1.0}\n')
    empty = run_cli("report", tmp_path)
    assert_paragraph(empty, "holds no training log yet")
    assert not (tmp_path / "report.png").exists()


@pytest.mark.slow
def test_demo_run_writes_its_report_and_grpo_report_rebuilds_it(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    trained = run_cli("train", DEMO, *FAST, "-o", out)
    assert trained.exit_code == 0, trained.output
    assert png_size(out / "report.png")[0] == 1200
    md = (out / "report.md").read_text()
    logs = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in r]
    final = logs[-1]["reward"]
    row = next(line for line in md.splitlines() if line.startswith("| reward |"))
    assert row.rstrip(" |").endswith(f"{final:.4f}")  # windows of 1 log: the final window is the last log
    assert "status: **completed** at step 4" in md
    assert "No guard fired (no health.jsonl)." in md  # default guards stay quiet on a healthy short run
    # Where the time goes: every logged step carries the split, and its parts add up to the whole step.
    split = [{k: v for k, v in r.items() if k.startswith("time/")} for r in logs]
    assert all(set(s) == {f"time/{p}" for p in PARTS} for s in split)
    assert all(s["time/generation"] > 0 and s["time/forward"] > 0 and s["time/backward"] > 0 for s in split)
    for parts, row in zip(split, logs, strict=True):  # TRL's step_time lies inside the step the split covers
        assert row["step_time"] <= sum(parts.values()) + 0.01 < 1.25 * row["step_time"] + 0.05
    assert "## Where the time goes" in md and "| generation |" in md

    custom = tmp_path / "custom" / "demo.png"
    rebuilt = run_cli("report", out, "--out", custom)
    assert rebuilt.exit_code == 0, rebuilt.output
    assert png_size(custom) == png_size(out / "report.png") and custom.with_suffix(".md").exists()
    assert f"final reward {final:.4f}" in rebuilt.output and "4 training logs" in rebuilt.output


def _figure_of(out: Path) -> Any:
    from grpo_cli.artefacts.report import load_run
    from grpo_cli.artefacts.report_plot import figure

    return figure(load_run(out))


def _panels(fig: Any) -> dict[str, Any]:
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title()}


def test_every_axis_is_labelled_and_no_legend_covers_a_curve(gappy_run: Path) -> None:
    fig = _figure_of(gappy_run)
    renderer = fig.canvas.get_renderer()
    drawn = [ax for ax in fig.axes if ax.axison and ax.lines]
    assert drawn
    for ax in drawn:
        assert ax.get_ylabel().strip(), f"panel {ax.get_title()!r} has an unlabelled y axis"
        legend = ax.get_legend()
        if legend is not None:  # the legend's box and the plotting area do not overlap
            box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert box.y1 <= area.y0 + 1, f"the legend of {ax.get_title()!r} is drawn over the curves"


def test_constant_metrics_are_text_and_flat_curves_are_not_magnified(gappy_run: Path) -> None:
    fig = _figure_of(gappy_run)
    panels = _panels(fig)
    assert "learning rate" not in panels and "reward spread" not in panels  # 1e-5 and 0.5 at every step
    title = fig.get_suptitle()
    assert "constant over the run: groups with zero std 0.5, entropy 0.3, learning rate 1e-05" in title
    assert "fmt" in [line.get_label() for line in panels["reward (total and per function)"].lines]
    low, high = panels["completions"].get_ylim()
    assert low == 0 and high > 30  # lengths 21..30 tokens start from 0, not a zoom on the noise
    assert all(line.get_markersize() > 0 for ax in fig.axes for line in ax.lines if len(line.get_xdata()) <= 30)


def test_held_out_scores_and_tool_metrics_get_panels(tmp_path: Path) -> None:
    out = tmp_path / "tools"
    out.mkdir()
    records = [{"step": s, "reward": 0.1 * s, "loss": 0.01 * s, "completions/mean_length": 30 + s,
                "tools/call_frequency": 0.4 + 0.05 * s, "tools/failure_frequency": 0.3 - 0.02 * s}
               for s in range(1, 6)]
    _write_jsonl(out / "metrics.jsonl", records)
    before = {"prompts": 40, "k": 4, "pass@1": 0.2, "pass@4": 0.5, "accuracy/mean": 0.2}
    (out / "manifest.json").write_text(json.dumps({"status": "completed", "global_step": 5, "eval_before": before,
                                                   "eval_after": {**before, "pass@1": 0.45, "pass@4": 0.8}}))
    fig = _figure_of(out)
    panels = _panels(fig)
    tools = panels["tool calls"]
    assert [line.get_label() for line in tools.lines] == ["calls per completion"]
    twin = next(ax for ax in fig.axes if ax is not tools and ax.bbox.bounds == tools.bbox.bounds)
    assert [line.get_label() for line in twin.lines] == ["failed calls"]
    held = panels["held-out evaluation (before → after training)"]
    assert [t.get_text() for t in held.get_xticklabels()] == ["pass@1", "pass@4"]
    assert sorted(t.get_text() for t in held.texts) == ["0.200", "0.450", "0.500", "0.800"]


def test_report_of_a_device_or_pipe_as_metrics_says_it_is_not_a_regular_file(tmp_path: Path) -> None:
    """/dev/urandom or a named pipe standing as metrics.jsonl was reported missing; read, it would never end."""
    for run in not_regular_files(tmp_path, "metrics.jsonl"):
        assert_paragraph(run_cli("report", run), "OUTPUT_DIR", "metrics.jsonl is not a regular file")
        assert not (run / "report.png").exists()


def test_report_md_shows_escapes_from_completions_not_the_raw_bytes(gappy_run: Path) -> None:
    """report.md is read with `cat` as often as on the Hub: a completion's ESC[2J is written as its escape."""
    _write_jsonl(gappy_run / "completions.jsonl", [{"step": 4, "prompt": "q\x1b]0;title\x07", "completion":
                                                    "A\x1b[2JB", "reward": 1.0, "advantage": 0.0}])
    result = run_cli("report", gappy_run)
    assert result.exit_code == 0, result
    md = (gappy_run / "report.md").read_text()
    assert "\x1b" not in md and "A\\x1b[2JB" in md and "q\\x1b]0;title\\x07" in md
