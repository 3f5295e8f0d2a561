"""The time plan: `grpo validate` plans the steady step from measured rates, a run measures its own and teaches
the next plan, the report and the summary check one against the other, a price gives the cost, and what is not
known stays unknown. Expected figures are worked out from the rates the runs record, never written in."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_cli import runs
from grpo_cli.step_rates import DEFAULT_FIXED, PARTS, RateRow, Seconds, remember, remembered_rates, shipped_rates
from tests.conftest import RECIPES, ROOT, assert_paragraph, plan_text, run_cli

DEMO = RECIPES / "demo.yaml"
SHORT = ("training.max_steps=3", "training.logging_steps=1", "eval.before_after=false")


def _plan(*args: str) -> dict:
    result = run_cli("validate", DEMO, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _train(out: Path, *args: str) -> str:
    result = run_cli("train", DEMO, *SHORT, *args, "-o", out)
    assert result.exit_code == 0, result.output
    return result.output


def _longest(row: RateRow, completions: int, limit: int) -> float:
    """The expected longest of `completions` token lengths drawn from the row's (cut at the limit with its
    clipped share, else one of its lengths): the sum over l of P(longest >= l)."""
    def shorter(length: int) -> float:  # P(one completion is shorter than `length`)
        ended = sum(min(v, limit) < length for v in row.lengths) / max(len(row.lengths), 1)
        return (1 - (row.clipped or 0.0)) * ended
    return sum(1 - shorter(length) ** completions for length in range(1, limit + 1))


def _grown(row: RateRow, batch: float, limit: int | None = None) -> dict[str, float]:
    """What each part of `row` should take at `batch` times its completions (and `limit` tokens): its fixed
    seconds stay, the rest grows with the completions (weight sync does not grow with them); generation, of a
    row that recorded its completion lengths, x the expected longest completion of a batch against the row's
    (transformers decodes a batch until its longest ends), else x the token limit against the row's."""
    fixed = {p: row.fixed.get(p, DEFAULT_FIXED.get(p, 0.0) * row.seconds[p].mean) for p in PARTS}
    grown = {p: fixed[p] + (row.seconds[p].mean - fixed[p]) * (1.0 if p == "weight_sync" else batch) for p in PARTS}
    r, limit = row.shape, limit or row.shape.completion_tokens
    decode = limit / r.completion_tokens
    if row.decode_steps is not None:
        decode = min(_longest(row, round(batch * r.completions), limit) / _longest(row, r.completions,
                                                                                   r.completion_tokens),
                     limit / row.decode_steps)
    return {**grown, "generation": grown["generation"] * decode}


def _plan_parts(*args: str) -> dict[str, float]:
    return {p["part"]: p["seconds"]["mean"] for p in _plan(*args)["time_plan"]["parts"]}


def test_a_run_teaches_the_next_plan_on_this_machine(tmp_path: Path, rates_file: Path) -> None:
    out = tmp_path / "run"
    _train(out)
    measured = runs.read_manifest(out).step_rates
    assert measured is not None and measured.steps == 2  # 3 steps, the first (warm-up) not counted
    remembered = remembered_rates(rates_file)[measured.machine]
    assert [r.model_dump() for r in remembered] == [measured.model_dump()]
    # one run at one batch size: its fixed seconds per part come from the shipped fitted row, scaled to the run
    assert set(measured.fixed) == set(PARTS) and "shipped table" in measured.fit
    assert all(0 <= measured.fixed[p] <= measured.seconds[p].mean for p in PARTS)

    same = _plan()["time_plan"]
    assert all(p["source"].startswith(f"your run {out}") for p in same["parts"])
    assert same["step"]["mean"] == pytest.approx(measured.seconds["step"].mean)
    # a similar recipe: twice and half the completions a step, each part the run's fixed + per-completion terms
    for batch, ratio in (("128", 2.0), ("24", 24 / 64)):
        planned = _plan_parts(f"training.per_device_train_batch_size={batch}")
        assert planned == pytest.approx(_grown(measured, ratio), abs=1e-6)  # fixed seconds kept to 6 places
    text = run_cli("validate", DEMO, "training.per_device_train_batch_size=24")
    assert "s per completion" in " ".join(text.output.split())
    # the demo's completions end after two digits (EOS by the 3rd token): a longer token limit decodes no longer
    assert measured.clipped == 0 and measured.lengths and measured.decode_steps <= 3
    longer = _plan_parts("training.max_completion_length=16")
    assert longer["generation"] == pytest.approx(measured.seconds["generation"].mean)  # before: 4x


def test_two_runs_at_two_batch_sizes_fit_the_plan_here(tmp_path: Path, rates_file: Path) -> None:
    """The second run of a kind at another batch size: the remembered row's fixed seconds are fitted from the
    user's two runs (a straight line through both), and the plan for a third size follows that line."""
    _train(tmp_path / "small", "training.per_device_train_batch_size=32")
    small = runs.read_manifest(tmp_path / "small").step_rates
    _train(tmp_path / "large")
    large = runs.read_manifest(tmp_path / "large").step_rates
    [row] = remembered_rates(rates_file)[large.machine]  # one row of the kind: the second replaced the first
    assert row.fit == "your runs at 32 and 64 completions a step"
    for part in PARTS:  # the line through both runs' measured seconds, held at 0 or above; none where it falls
        # generation per decode step: each run decoded until its batches' longest completions ended
        per = (small.decode_steps, large.decode_steps) if part == "generation" else (1.0, 1.0)
        assert per[0] and per[1]
        slope = (large.seconds[part].mean / per[1] - small.seconds[part].mean / per[0]) / 32
        line = large.seconds[part].mean / per[1] - slope * 64
        if slope < 0:
            assert part not in row.fixed
        else:
            assert row.fixed[part] == pytest.approx(min(large.seconds[part].mean, max(0.0, line * per[1])),
                                                    abs=1e-6)
    assert _plan_parts("training.per_device_train_batch_size=24") == pytest.approx(_grown(row, 24 / 64), abs=1e-6)


HOT = ("training.temperature=3.0", "training.max_completion_length=24")
"""The demo sampled hot: its completions end anywhere from 2 tokens to the limit."""


def _without_lengths(row: RateRow, rates_file: Path) -> RateRow:
    """The per-machine file holding only `row` as written before rows recorded completion lengths."""
    old = row.model_dump(mode="json")
    for key in ("decode_steps", "clipped", "lengths"):
        old.pop(key)
    rates_file.write_text(json.dumps({row.machine: [old]}), encoding="utf-8")
    return RateRow.model_validate(old)


def test_a_bigger_batch_plans_more_decode_steps_when_completions_end_early(tmp_path: Path, rates_file: Path) -> None:
    """Issue 50: transformers decodes a batch until its longest completion ends, and the longest of 64 sampled
    completions runs past the longest of 8; the plan grew generation with the completions alone, and planned
    SmolLM2 at batch 24 from its run at 16 up to 23 % short. Now a run records its completion lengths and the
    plan decodes the expected longest completion of a batch of the planned size; a row without them plans as
    before."""
    out = tmp_path / "hot"
    _train(out, *HOT, "training.per_device_train_batch_size=8")
    row = runs.read_manifest(out).step_rates
    assert row.clipped is not None and row.clipped < 1 and row.lengths and row.decode_steps < 24, row  # setup
    logged = [r["completions/max_length"] for r in runs.read_jsonl(out / "metrics.jsonl")
              if "completions/max_length" in r]
    # the step timer reads the completion ids from TRL's `_generate` result: its longest per batch is TRL's own
    assert row.decode_steps == pytest.approx(sum(logged) / len(logged), abs=1e-3)
    same = _plan_parts(*HOT, "training.per_device_train_batch_size=8")
    assert same["generation"] == pytest.approx(row.seconds["generation"].mean)
    sizes = (32, 64)
    planned = {b: _plan_parts(*HOT, f"training.per_device_train_batch_size={b}") for b in sizes}
    text = plan_text(run_cli("validate", DEMO, *HOT, "training.per_device_train_batch_size=64").output)
    assert "the expected longest of 64 completions" in text and "measured at 8" in text
    old = _without_lengths(row, rates_file)
    before = {b: _plan_parts(*HOT, f"training.per_device_train_batch_size={b}") for b in sizes}
    for b in sizes:
        assert before[b] == pytest.approx(_grown(old, b / 8), abs=1e-6)  # an old row: growth with completions
        assert planned[b] == pytest.approx(_grown(row, b / 8), abs=1e-6)
        assert planned[b]["generation"] > before[b]["generation"]  # more decode steps than the row's 8 took
        assert {p: v for p, v in planned[b].items() if p != "generation"} == pytest.approx(
            {p: v for p, v in before[b].items() if p != "generation"})
    assert planned[64]["generation"] / before[64]["generation"] >= planned[32]["generation"] / before[32]["generation"]


def test_completions_all_cut_at_the_limit_plan_as_the_token_limit_says(tmp_path: Path, rates_file: Path) -> None:
    """A run whose every completion was cut at max_completion_length (the demo at 2 tokens: its answers take 2 or
    3) decoded the limit in every batch, whatever its size: its plan at another batch or limit is exactly the
    one of the same row without completion lengths."""
    out = tmp_path / "cut"
    _train(out, "training.max_completion_length=2")
    row = runs.read_manifest(out).step_rates
    assert row.clipped == 1.0 and row.decode_steps == 2.0 and row.lengths == []
    variants = [("training.max_completion_length=2", "training.per_device_train_batch_size=24"),
                ("training.max_completion_length=4",),
                ("training.max_completion_length=4", "training.per_device_train_batch_size=128")]
    planned = [_plan_parts(*v) for v in variants]
    _without_lengths(row, rates_file)
    assert [_plan_parts(*v) for v in variants] == planned


def test_the_plan_prints_the_run_and_its_cost(tmp_path: Path, rates_file: Path) -> None:
    _train(tmp_path / "run")
    plain = _plan()
    assert plain["time_plan"]["cost"] is None and "cost" not in plain["plan"]
    priced = _plan("--price-per-hour", "2.5")
    plan = priced["time_plan"]
    assert plan["steps"] == 200 and plan["price_per_hour"] == 2.5
    run = plan["step"]["mean"] * plan["steps"] + plan["evaluation"]["mean"]
    assert plan["run"]["mean"] == pytest.approx(run)
    assert plan["cost"]["mean"] == pytest.approx(run * 2.5 / 3600)
    assert "time per step" in priced["plan"] and "time for the run" in priced["plan"]
    assert "2.5 per device-hour" in priced["plan"]["cost"]
    text = run_cli("validate", DEMO, "launch.price_per_hour=2.5")
    assert "time per step" in text.output and "cost" in text.output


def test_without_a_rate_the_plan_says_unknown(tmp_path: Path, rates_file: Path, write_recipe) -> None:
    """vLLM in server mode has no measured step anywhere: no number is made up."""
    plan = _plan("launch.vllm.mode=server")["time_plan"]
    assert plan["parts"] == [] and plan["step"] is None and plan["run"] is None and plan["cost"] is None
    assert "no measured vllm-server step" in plan["unknown"]
    text = run_cli("validate", DEMO, "launch.vllm.mode=server", "--price-per-hour", "3")
    assert "unknown" in text.output and "cost" not in text.output


def test_a_wrong_recorded_rate_is_named_when_the_step_is_far_off(tmp_path: Path, rates_file: Path) -> None:
    _train(tmp_path / "first")
    real = next(iter(remembered_rates(rates_file).values()))[0]
    seconds = dict(real.seconds)
    for part in ("generation", "training"):  # recorded 50x too fast
        seconds[part] = seconds[part].scaled(1 / 50)
    wrong = real.model_copy(update={"seconds": seconds, "run_dir": "a run with wrong rates"})
    rates_file.unlink()
    remember(wrong, rates_file)
    out = tmp_path / "second"
    output = _train(out)
    manifest = runs.read_manifest(out)
    plan, measured = manifest.time_plan, manifest.step_rates
    assert measured.seconds["step"].mean > 2 * plan.step.mean
    excess = {p: measured.seconds[p].mean - plan.part(p).seconds.mean for p in PARTS}  # type: ignore[union-attr]
    worst = max(excess, key=excess.__getitem__)
    assert worst in ("generation", "training")
    assert "time plan off: the steady step took" in output and f"{worst} was off" in output
    assert "a run with wrong rates" in output
    report = (out / runs.REPORT_SUMMARY).read_text(encoding="utf-8")
    assert "## Time plan against measured" in report and f"{worst} was off" in report


@pytest.mark.parametrize("price", ["inf", "1e400", "nan"])
def test_a_price_that_is_not_finite_is_refused(price: str) -> None:
    """Issue 46 sweep: `--price-per-hour inf` (or 1e400) printed a cost of "~inf (inf–inf)"."""
    assert_paragraph(run_cli("validate", DEMO, "--price-per-hour", price), "launch.price_per_hour", "finite number")


def test_a_price_of_true_is_not_read_as_one() -> None:
    """Issue 46 sweep: `launch.price_per_hour: true` was read as 1 and the plan priced the run at 1 per hour."""
    assert_paragraph(run_cli("validate", DEMO, "launch.price_per_hour=true"), "launch.price_per_hour",
                     "a finite number > 0", "got True")


def test_a_rates_file_that_is_a_fifo_does_not_hang_validate(tmp_path: Path) -> None:
    """Issue 46 sweep: `$GRPO_RATES_FILE` naming a FIFO blocked `grpo validate` (and the end of `grpo train`)
    forever, reading it. Now it is not a rates file: the plan uses the shipped table, the FIFO stays."""
    fifo = tmp_path / "rates.json"
    os.mkfifo(fifo)
    env = {**os.environ, "GRPO_RATES_FILE": str(fifo), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "grpo_cli", "validate", str(DEMO), "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["time_plan"]["parts"][0]["source"].startswith("shipped table")
    with pytest.raises(OSError, match="not a rates file"):
        remember(_shipped_row(), fifo)
    assert fifo.is_fifo()


def _shipped_row() -> RateRow:
    """A row of the shipped table, as a run would remember it."""
    from grpo_cli.step_rates import shipped_rates

    return shipped_rates()[0]


def test_a_damaged_rates_file_is_kept_and_the_run_is_not_lost(tmp_path: Path, rates_file: Path) -> None:
    """Issue 46 sweep: at the end of `grpo train` a damaged per-machine file (a hand edit cut short) was replaced
    by a fresh one without a word. Now it is kept byte for byte, the run completes, and a note says why."""
    rates_file.write_text('{"cpu": [1,', encoding="utf-8")
    out = tmp_path / "run"
    output = _train(out)
    assert rates_file.read_text(encoding="utf-8") == '{"cpu": [1,'
    assert "could not remember this run's rates" in output and "is not a rates file" in " ".join(output.split())
    assert runs.read_manifest(out).step_rates is not None
    damaged = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    damaged["step_rates"]["seconds"] = {}  # a damaged manifest: a KeyError traceback in `grpo report`
    damaged["time_plan"]["parts"][0]["seconds"]["mean"] = float("nan")
    (out / "manifest.json").write_text(json.dumps(damaged), encoding="utf-8")
    result = run_cli("report", out)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    report = " ".join((out / runs.REPORT_SUMMARY).read_text(encoding="utf-8").split())
    assert "Not checked: the manifest's `time_plan` holds no usable seconds" in report


HAND_EDITS = {  # a hand-edited row of this machine's file -> whether the plan still starts from it
    "fixed -5": (lambda d: d["fixed"].update(generation=-5.0), True),
    "fixed NaN": (lambda d: d["fixed"].update(generation=float("nan")), True),
    "fixed 1e300": (lambda d: d["fixed"].update(generation=1e300), True),
    "no fit": (lambda d: d.update(fixed={}, fit=""), True),
    "mean inf": (lambda d: d["seconds"]["generation"].update(mean=float("inf")), False),
    "seconds < 0": (lambda d: d["seconds"].update(training={"mean": -3.0, "low": -4.0, "high": -2.0}), False),
    "mean NaN": (lambda d: d["seconds"]["training"].update(mean=float("nan")), False),
    "mean 1e308": (lambda d: d["seconds"].update(training={"mean": 1e308, "low": 1e308, "high": 1e308}), False),
    "0 completions": (lambda d: d["shape"].update(completions=0), False),
    "tokens < 0": (lambda d: d["shape"].update(completion_tokens=-4, prompt_tokens=-10.0), False),
    "clipped 2": (lambda d: d.update(decode_steps=3.0, clipped=2.0, lengths=[2.0]), True),
    "length NaN": (lambda d: d.update(decode_steps=3.0, clipped=0.0, lengths=[float("nan")]), True),
    "decode -3": (lambda d: d.update(decode_steps=-3.0, clipped=0.0, lengths=[2.0]), True),
    "no lengths": (lambda d: d.update(decode_steps=3.0, clipped=0.5, lengths=[]), True),
    "trained 3": (lambda d: d["shape"].update(trained=3.0), False),
    "trained NaN": (lambda d: d["shape"].update(trained=float("nan")), False),
}


@pytest.mark.parametrize("edit", list(HAND_EDITS))
def test_a_hand_edited_rate_never_plans_a_negative_or_nan_time(edit: str, rates_file: Path) -> None:
    """Review of issue 50: a row of the per-machine file with negative, NaN or huge seconds planned `~-3 s`, `~nan
    h` or a 300-digit step, and a fixed part of -5 s printed `-5 s fixed`. Now a row whose seconds cannot be a
    measured step is skipped (the plan starts from the shipped table) and a fixed part that cannot be a fit is
    dropped (the row stays): every time finite and at least 0, at half the row's batch too (the fit's own line)."""
    from grpo_cli.hardware import machine

    row = next(r for r in shipped_rates() if r.shape.model == "bundled:tiny-arith").model_dump(mode="json")
    row.update(run_dir="outputs/hand-edited", machine=machine())
    change, kept = HAND_EDITS[edit]
    change(row)
    rates_file.write_text(json.dumps({machine(): [row]}), encoding="utf-8")
    plan = _plan("training.per_device_train_batch_size=32")["time_plan"]
    figures = [v for name in ("step", "run") for v in plan[name].values()]
    figures += [v for p in plan["parts"] for v in p["seconds"].values()]
    assert all(math.isfinite(v) and v >= 0 for v in figures), plan
    assert all(("your run outputs/hand-edited" in p["source"]) == kept for p in plan["parts"]), plan
    text = plan_text(run_cli("validate", DEMO, "training.per_device_train_batch_size=32").output)
    assert not re.search(r"(nan|inf) [sh]\b|(?<![\w.+-])-\d[\d.e+-]* s\b", text), text


def test_a_plan_scales_a_row_of_another_model_by_its_work() -> None:
    """A row of a different model size: generation by decoded tokens x parameters, training by trained tokens x
    FLOPs per token (6 x parameters in full, 4 x with LoRA); a fitted row's fixed seconds do not grow with the
    completions, and the rest does."""
    from grpo_cli.planning.time_plan import SCALE_LIMIT, plan_step
    from grpo_cli.step_rates import StepShape

    row_shape = StepShape(model="a", params=100, lora=False, backend="transformers", processes=1, threads=1,
                          completions=8, completion_tokens=10, prompt_tokens=5.0, data="d", rewards=["accuracy"])
    one = Seconds(mean=1.0, low=0.5, high=2.0)
    row = RateRow(machine="m", date="2026", command="c", shape=row_shape, steps=3,
                  seconds={p: one for p in (*PARTS, "step")})
    shape = row_shape.model_copy(update={"model": "b", "params": 300, "lora": True, "completions": 16,
                                         "prompt_tokens": None})
    parts = {e.part: e for e in plan_step(shape, "m", [row], {"accuracy": 1000.0})}
    assert parts["generation"].seconds.mean == pytest.approx(16 * 10 * 300 / (8 * 10 * 100))
    assert parts["training"].seconds.mean == pytest.approx(16 * 15 * 4 * 300 / (8 * 15 * 6 * 100))
    assert parts["training"].seconds.high == pytest.approx(2 * parts["training"].seconds.mean)
    assert parts["reward"].seconds.mean == pytest.approx(2.0)  # same rewards: the row's, per completion
    assert parts["other"].seconds.mean == pytest.approx(1.0)  # no fit: the rest of the step is taken as fixed
    assert "scaled from a" in parts["generation"].how
    fitted = row.model_copy(update={"fixed": {"generation": 0.75, "training": 0.0}, "fit": "two sizes"})
    parts = {e.part: e for e in plan_step(shape, "m", [fitted], {})}
    assert parts["generation"].seconds.mean == pytest.approx((0.75 + 0.25 * 2) * 3)  # fixed + 2x per completion
    assert "0.75 s fixed + 0.0312 s per completion (two sizes)" in parts["generation"].how
    assert parts["training"].seconds.mean == pytest.approx(16 * 15 * 4 * 300 / (8 * 15 * 6 * 100))
    far = shape.model_copy(update={"params": int(row_shape.params * SCALE_LIMIT) + 1})
    assert plan_step(far, "m", [row], {}) == []  # a model beyond the scaling limit is not guessed from it
    elsewhere = {e.part: e for e in plan_step(shape, "another machine", [row], {})}
    assert all(e.source.startswith("assumed, measured on another machine") for e in elsewhere.values())


def test_benchmark_smoke(tmp_path: Path) -> None:
    """benchmarks/micro/plan_vs_measured.py's tiny run: one recipe, two steps, its row planned and measured."""
    table = tmp_path / "table.md"
    done = subprocess.run([sys.executable, "benchmarks/micro/plan_vs_measured.py", "--cases", "demo", "--steps", "2",
                           "--out", str(table)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [line for line in table.read_text(encoding="utf-8").splitlines() if line.startswith("| demo |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert float(cells[2].split()[0]) > 0  # measured
    assert cells[1] == "unknown" or float(cells[1].split()[0]) > 0
    assert cells[6].endswith(" of 4")  # the mean longest completion
    assert cells[7] == ""  # every completion of the demo trains, as planned
