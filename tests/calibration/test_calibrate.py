"""`grpo calibrate` on the demo, for real: the bundled model samples every completion, the histogram it prints is
the per-row pass rates it writes, `validate` and `train` apply the `data.pass_rate` filter it suggests, and an
interrupted or shorter calibration resumes to exactly what an uninterrupted one writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import RECIPES, ROOT, assert_paragraph, plan_text, run_cli, sigint_as_a_terminal

DEMO = RECIPES / "demo.yaml"
FAST_TRAIN = ["training.max_steps=1", "training.logging_steps=1", "eval.before_after=false"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_histogram_matches_the_rows_and_validate_and_train_apply_the_filter(tmp_path: Path) -> None:
    out = tmp_path / "cal"
    result = run_cli("calibrate", DEMO, "--max-prompts", "40", "-k", "4", "--out", out)
    assert result.exit_code == 0, result.output
    rows = _rows(out / "calibration.jsonl")
    assert len(rows) == 40 and len({r["key"] for r in rows}) == 40
    for r in rows:  # the pass rate is the share of the row's own scores that pass
        assert r["k"] == 4 and len(r["scores"]) == 4 and r["passes"] == sum(s == 1.0 for s in r["scores"])
        assert r["pass_rate"] == r["passes"] / 4
    counts = [sum(r["passes"] == c for r in rows) for c in range(5)]
    printed = {int(m[1]): int(m[2]) for m in re.finditer(r"│\s+(\d)/4 │\s+[\d.]+ │\s+(\d+) │", result.output)}
    assert printed == dict(enumerate(counts))
    assert json.loads((out / "calibration.json").read_text())["histogram"] == counts
    no_signal = (counts[0] + counts[4]) / 40
    assert f"no signal: {no_signal:.0%} of prompts ({counts[0]} never passed, {counts[4]} always passed)" \
        in result.output
    kept = sum(counts[1:4])
    assert f"kept by (0, 1): {kept} of 40 prompts" in result.output
    assert 0 < kept < 40  # the demo model solves some sums sometimes: both kinds exist in 40 prompts x 4
    # filtered.jsonl: the kept rows as the data file has them
    source = {json.dumps(r, sort_keys=True) for r in _rows(ROOT / "grpo_cli/assets/tiny-arith-data/train.jsonl")}
    filtered = _rows(out / "filtered.jsonl")
    assert len(filtered) == kept and all(json.dumps(r, sort_keys=True) in source for r in filtered)
    by_prompt = {r["prompt"]: r["pass_rate"] for r in rows}
    assert all(0 < by_prompt[r["question"] + "="] < 1 for r in filtered)
    override = yaml.safe_load((out / "override.yaml").read_text())
    assert override == {"data": {"pass_rate": {"file": str((out / "calibration.jsonl").resolve()),
                                               "range": "(0, 1)"}}}
    apply = f"data.pass_rate.file={out / 'calibration.jsonl'}"
    assert f"grpo train {DEMO} {apply}" in result.output

    checked = run_cli("validate", DEMO, apply)
    assert checked.exit_code == 0, checked.output
    assert re.search(rf"train rows\s+│ {kept}\s", checked.output), checked.output
    assert f"pass-rate filter keeps {kept} of 40 calibrated" in " ".join(checked.output.split())
    # with no earlier run, sampling.dynamic's plan prices both strategies from the kept prompts' pass rates
    from grpo_cli.validation.sampling_checks import expected_filler

    rates = [by_prompt[r["question"] + "="] for r in filtered]
    zero = sum(p ** 8 + (1 - p) ** 8 for p in rates) / len(rates)  # the demo's groups of 8
    priced = run_cli("validate", DEMO, apply, "sampling.dynamic={strategy: oversample}",
                     f"output.dir={tmp_path / 'no-run'}")
    assert priced.exit_code == 0, priced.output
    plan = plan_text(priced.output)
    assert (f"calibrated pass rates give {zero:.0%} zero-std groups: +100% generation per step, in one round of 16 "
            f"groups for 8, about {expected_filler(16, 8, 1 - zero):.0%} of trained groups flat filler; strategy: "
            f"refill (3 rounds) instead: about +{zero / (1 - zero):.0%} generation per step") in plan, plan

    run = tmp_path / "run"
    trained = run_cli("train", DEMO, apply, *FAST_TRAIN, "-o", run)
    assert trained.exit_code == 0, trained.output
    data = json.loads((run / "manifest.json").read_text())["data"]
    assert data["train_rows"] == kept and data["train_dropped_by_pass_rate"] == 300 - kept
    assert f"{300 - kept} dropped by data.pass_rate" in trained.output
    prompts = {r["prompt"] for r in _rows(run / "completions.jsonl")}
    assert prompts and all(0 < by_prompt[p] < 1 for p in prompts)  # trained on kept prompts only
    # fewer kept prompts than one step takes: refused, not a run that loads the model and stops at step 0
    too_few = run_cli("validate", DEMO, apply, f"training.per_device_train_batch_size={8 * (kept + 1)}")
    assert_paragraph(too_few, "data.pass_rate", f"{kept} training row(s) after the pass-rate filter",
                     "0 optimizer steps", f"needs {kept + 1} prompts", "grpo calibrate --max-prompts")


@pytest.mark.slow
def test_a_longer_resumed_calibration_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    short, whole = tmp_path / "resumed", tmp_path / "whole"
    assert run_cli("calibrate", DEMO, "--max-prompts", "8", "-k", "4", "--out", short).exit_code == 0
    assert len(_rows(short / "calibration.jsonl")) == 8
    again = run_cli("calibrate", DEMO, "--max-prompts", "24", "-k", "4", "--out", short, "--resume")
    assert again.exit_code == 0, again.output
    assert "(8 done before, resumed)" in again.output
    assert run_cli("calibrate", DEMO, "--max-prompts", "24", "-k", "4", "--out", whole).exit_code == 0
    assert (short / "calibration.jsonl").read_text() == (whole / "calibration.jsonl").read_text()


@pytest.mark.slow
def test_ctrl_c_keeps_the_finished_batches_and_resume_finishes(tmp_path: Path) -> None:
    out = tmp_path / "cal $(touch PWNED)"  # the printed hint must quote it: run as printed, it creates nothing
    partial = out / "calibration.partial.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # 16 completions a prompt: the tiny model samples all 300 prompts x 4 in about a second and a half on a quiet
    # machine, too little room to land Ctrl-C between batches every time
    proc = subprocess.Popen([sys.executable, "-m", "grpo_cli", "calibrate", str(DEMO), "-k", "16", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=sigint_as_a_terminal)
    deadline = time.monotonic() + 300
    while not (partial.exists() and len(partial.read_text().splitlines()) >= 16) and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the calibration ended before Ctrl-C could be sent: " + proc.communicate()[0][-2000:]
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output
    assert "--resume" in output and not (out / "calibration.jsonl").exists()
    hint = re.search(r"continue with `(grpo calibrate .*)`", " ".join(output.split()))
    assert hint, output
    shell = subprocess.run(["bash", "-c", 'grpo() { printf "%s\\n" "$@"; }; ' + hint[1]], cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    assert not (tmp_path / "PWNED").exists()
    assert shell.stdout.splitlines() == ["calibrate", str(DEMO), "-k", "16", "--out", str(out), "--resume"]
    assert not list(out.glob(".*.tmp"))  # no half-written file
    done = _rows(partial)
    assert 16 <= len(done) < 300 and len(done) % 8 == 0  # whole batches only
    resumed = run_cli("calibrate", DEMO, "-k", "16", "--out", out, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert f"({len(done)} done before, resumed)" in resumed.output
    rows = _rows(out / "calibration.jsonl")
    assert len(rows) == 300 and len({r["key"] for r in rows}) == 300 and rows[:len(done)] == done
    assert not partial.exists()
    train = re.search(r"train on them: (grpo train .*)", resumed.output)
    shell = subprocess.run(["bash", "-c", 'grpo() { printf "%s\\n" "$@"; }; ' + train[1]], cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    assert shell.stdout.splitlines()[-1] == f"data.pass_rate.file={(out / 'calibration.jsonl').resolve()}"
    assert not (tmp_path / "PWNED").exists()


def test_bad_requests_are_one_paragraph_before_any_model_loads(tmp_path: Path) -> None:
    for args, where, words in [
        (["--reward", "nope"], "--reward", "'nope' is not a reward of this recipe"),
        (["--threshold", "nan"], "--threshold", "--threshold nan is not a number"),
        (["--threshold", "inf"], "--threshold", "--threshold inf is not a number"),
        (["-k", "1"], "-k", "its pass rate is 0 or 1, never in (0, 1)"),
        (["-t", "0"], "--temperature", "samples greedily: the k completions of a prompt are all the same"),
        (["-t", "inf"], "--temperature", "is not a sampling temperature"),
        (["-t", "nan"], "--temperature", "--temperature nan is not a sampling temperature"),
        (["-t", "-1"], "--temperature", "--temperature -1.0 is not a sampling temperature"),
        (["--reward", ""], "--reward", "'' is not a reward of this recipe"),
        (["--resume", "--force"], "--resume/--force", "they cannot both hold"),
        (["training.max_completion_length=100000"], "training.max_completion_length",
         "leaves no room for a prompt in the model's 128 positions"),
        (["--range", "(0.9, 0.1)"], "--range", "0 <= LOW <= HIGH <= 1"),
        (["--range", "0-1"], "--range", "is not an interval"),
    ]:
        assert_paragraph(run_cli("calibrate", DEMO, *args, "--out", tmp_path / "x"), where, words)
    assert not (tmp_path / "x").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "calibration.jsonl").write_text("")
    result = run_cli("calibrate", DEMO, "--out", tmp_path / "old")
    assert_paragraph(result, "--resume", "--force")
    result = run_cli("validate", DEMO, f"data.pass_rate.file={tmp_path / 'none.jsonl'}")
    assert_paragraph(result, "grpo calibrate")


@pytest.mark.slow
def test_a_smaller_resume_keeps_every_finished_row(tmp_path: Path) -> None:
    out = tmp_path / "cal"
    assert run_cli("calibrate", DEMO, "--max-prompts", "16", "-k", "4", "--out", out).exit_code == 0
    before = (out / "calibration.jsonl").read_text()
    again = run_cli("calibrate", DEMO, "--max-prompts", "4", "-k", "4", "--out", out, "--resume")
    assert again.exit_code == 0, again.output
    assert "(16 done before, resumed; --max-prompts 4 asks no more, and every finished row is kept)" in \
        " ".join(again.output.split())
    assert (out / "calibration.jsonl").read_text() == before and len(_rows(out / "calibration.jsonl")) == 16
    assert json.loads((out / "calibration.json").read_text())["prompts"] == 16


@pytest.mark.slow
def test_a_resume_with_other_settings_is_refused_even_without_calibration_json(tmp_path: Path) -> None:
    out = tmp_path / "cal"
    assert run_cli("calibrate", DEMO, "--max-prompts", "8", "-k", "4", "--out", out).exit_code == 0
    rows = _rows(out / "calibration.jsonl")
    assert all(r["settings"]["k"] == 4 and r["settings"]["prompt"] == '{"template": "{question}="}' for r in rows)
    (out / "calibration.json").write_text("{ damaged")
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    assert_paragraph(run_cli("calibrate", DEMO, "--max-prompts", "16", "-k", "8", "--out", out, "--resume"),
               "--resume", "calibration.jsonl line 1 was calibrated with other settings: k 4 (now 8)", "--force")
    assert_paragraph(run_cli("calibrate", DEMO, "--max-prompts", "16", "-k", "4", "--out", out, "--resume",
                       "data.prompt.template=Q {question}="),
               "prompt '{\"template\": \"{question}=\"}' (now '{\"template\": \"Q {question}=\"}')",
               "mix pass rates of two settings", "--force", "another --out")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files  # nothing written


def test_damaged_outputs_are_one_paragraph_and_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "cal"
    (out / "calibration.jsonl").mkdir(parents=True)
    for flags in ([], ["--resume"], ["--force"]):
        assert_paragraph(run_cli("calibrate", DEMO, "--out", out, *flags), "--out",
                   "calibration.jsonl is a directory, not a file", "Move it away")
    assert (out / "calibration.jsonl").is_dir()
    dangling = tmp_path / "dangling"  # appending would create the link's target, then the link was replaced
    dangling.mkdir()
    (dangling / "calibration.partial.jsonl").symlink_to(tmp_path / "elsewhere" / "target.jsonl")
    assert_paragraph(run_cli("calibrate", DEMO, "--out", dangling, "--resume"), "--out",
                     "calibration.partial.jsonl is a symbolic link to nothing")
    assert not (tmp_path / "elsewhere").exists() and (dangling / "calibration.partial.jsonl").is_symlink()
    binary = tmp_path / "bin"
    binary.mkdir()
    (binary / "calibration.partial.jsonl").write_bytes(bytes(range(256)) * 4)
    assert_paragraph(run_cli("calibrate", DEMO, "--out", binary, "--resume"), "--resume",
               "calibration.partial.jsonl is not a calibration file (not UTF-8 text)", "--force")
    (binary / "calibration.partial.jsonl").write_text('{"key": "a", "k": 8, "passes": 1, "pass_rate": 0.1}\n[1, 2]\n')
    assert_paragraph(run_cli("calibrate", DEMO, "--out", binary, "--resume"), "--resume",
               "calibration.partial.jsonl line 2 is not a calibration row")
    for bad in ('"passes": "abc", "pass_rate": 0.1', '"passes": 9, "pass_rate": 0.1', '"passes": 1, "pass_rate": NaN'):
        (binary / "calibration.partial.jsonl").write_text('{"key": "a", "k": 8, ' + bad + '}\n')
        assert_paragraph(run_cli("calibrate", DEMO, "--out", binary, "--resume"), "--resume",
                   "calibration.partial.jsonl line 1 is not a calibration row", "passes from 0 to k")
    (binary / "calibration.partial.jsonl").write_text('{"key": "a", "prompt": "9+9=", "k": 8, "passes": 1, '
                                                      '"pass_rate": 0.125}\n')
    assert_paragraph(run_cli("calibrate", DEMO, "--out", binary, "--resume"), "--resume",
               "1 of the 1 finished rows in", "are of prompts this recipe's training split does not make",
               "'9+9='", "another --out")
    assert sorted(p.name for p in binary.iterdir()) == ["calibration.partial.jsonl"]


def test_a_forced_calibration_that_is_refused_leaves_the_earlier_one(tmp_path: Path) -> None:
    out = tmp_path / "cal"
    out.mkdir()
    files = {"calibration.jsonl": '{"key": "a", "k": 8, "passes": 1, "pass_rate": 0.125}\n', "override.yaml": "x\n"}
    for name, text in files.items():
        (out / name).write_text(text)
    assert_paragraph(run_cli("calibrate", DEMO, "--out", out, "--force", "data.max_prompt_tokens=1"), "data",
               "no training rows are left")
    assert {p.name: p.read_text() for p in out.iterdir()} == files


def test_a_damaged_tokenizer_file_is_oneone_paragraph(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(ROOT / "grpo_cli" / "assets" / "tiny-arith", model)
    (model / "tokenizer_config.json").write_text("[1]")
    assert_paragraph(run_cli("calibrate", DEMO, f"model.name_or_path={model}", "--out", tmp_path / "cal"),
               f"cannot load the tokenizer of {model}", "its tokenizer files")
    assert not (tmp_path / "cal").exists()


@pytest.mark.slow
def test_a_torn_last_line_is_sampled_again(tmp_path: Path) -> None:
    whole, torn = tmp_path / "whole", tmp_path / "torn"
    args = ["-k", "4", "--max-prompts", "8", "--batch-size", "4"]
    assert run_cli("calibrate", DEMO, *args, "--out", whole).exit_code == 0
    lines = (whole / "calibration.jsonl").read_text().splitlines(keepends=True)
    torn.mkdir()  # a write killed in the second batch: its first line half there, no newline
    (torn / "calibration.partial.jsonl").write_text("".join(lines[:4]) + lines[4][:40])
    resumed = run_cli("calibrate", DEMO, *args, "--out", torn, "--resume")
    assert resumed.exit_code == 0 and "(4 done before, resumed)" in resumed.output, resumed
    assert (torn / "calibration.jsonl").read_text() == (whole / "calibration.jsonl").read_text()
