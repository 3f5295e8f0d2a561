"""The run manifest (grpo_cli/runs/manifest.py): a run directory written before manifests had a version still reads,
and renders in `grpo report` and the model card as it did; a manifest written and read back is the same."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_cli import runs
from grpo_cli.runs.manifest import MANIFEST_VERSION, Best, Manifest, Scores, start_manifest
from tests.conftest import run_cli

# A completed run's manifest as grpo wrote it before the `version` field: `runs.start_manifest` plus the
# `manifest.update(...)` calls of training/run.py and the task metric's `manifest["best"] = record`, key for key.
BEFORE = {"label": "before training", "prompts": 16, "k": 2, "accuracy/mean": 0.25, "accuracy/std": 0.43,
          "pass@1": 0.25, "pass@2": 0.375, "mean_length": 21.5, "truncation_rate": 0.0}
AFTER = {**BEFORE, "label": "after training", "accuracy/mean": 0.5, "pass@1": 0.5, "pass@2": 0.625}
OLD = {
    "status": "completed", "started": "2026-11-22T09:00:00+00:00", "finished": "2026-11-22T09:04:10+00:00",
    "command": ["grpo", "train", "recipes/demo.yaml"], "recipe": "recipes/demo.yaml", "seed": 42, "world_size": 1,
    "git": {"commit": "9893ef2", "dirty": True},
    "versions": {"python": "3.11.9", "grpo-cli": "0.1.0", "torch": "2.9.0", "transformers": "4.57.1", "trl": "0.25.0"},
    "hardware": {"platform": "Linux-6.8-x86_64", "cpu_count": 8, "cuda": False, "torch_threads": 8},
    "output_dir": "outputs/demo", "resumed_from": None,
    "data": {"train_rows_loaded": 64, "train_rows": 64, "eval_rows": 16},
    "dtype": "float32", "device": "cpu", "threads": "8 torch threads",
    "best": {"step": 4, "metric": "task/eval/accuracy", "value": 0.5, "path": "best"},
    "tools": {"add": {"calls": 12, "failures": 1, "timeouts": 0, "results_cut": 0, "mean_seconds": 0.0004,
                      "last_error": "ValueError: not a number"}},
    "global_step": 8, "message": "", "eval_before": BEFORE, "eval_after": AFTER,
}


def _run_dir(tmp_path: Path, manifest: dict) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    (out / runs.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    records = [{"step": s, "reward": 0.1 * s, "loss": 0.01 * s} for s in range(1, 9)]
    records += [{"step": s, "task/eval/accuracy": 0.125 * s} for s in (2, 4)]
    (out / runs.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return out


def test_an_unversioned_manifest_reads_and_renders_as_before(tmp_path: Path) -> None:
    out = _run_dir(tmp_path, OLD)
    manifest = runs.read_manifest(out)
    assert manifest is not None and manifest.version == 0  # written before the field existed
    assert (manifest.status, manifest.global_step, manifest.world_size) == ("completed", 8, 1)
    assert manifest.git is not None and manifest.git.dirty and manifest.package_version("trl") == "0.25.0"
    assert manifest.best == Best(step=4, metric="task/eval/accuracy", value=0.5, path="best")
    assert ("pass@1", 0.25, 0.5) in manifest.held_out()
    result = run_cli("report", out)
    assert result.exit_code == 0, result.output
    report = (out / runs.REPORT_SUMMARY).read_text(encoding="utf-8")
    assert "- status: **completed** at step 8" in report and "- recipe: `recipes/demo.yaml`" in report
    assert "| pass@1 | 0.2500 | 0.5000 |" in report and "| label |" not in report
    assert "Best: task/eval/accuracy = 0.5000 at step 4" in report
    assert "| add | 12 | 1 | 0 | 0.4 | ValueError: not a number |" in report

    from grpo_cli.artefacts.card import build_card

    card = build_card(out, run_dir=out, base="bundled:tiny-arith", adapter=False)
    assert "using TRL 0.25.0" in card and "- 1 process(es), cpu, float32" in card
    assert "- task metric `task/eval/accuracy`: best 0.5000 at step 4 (saved in `best/`)" in card
    assert "16 prompts from the `eval` split" in card and "2 completion(s) each" in card
    assert "| pass@2 | 0.3750 | 0.6250 |" in card and "- trl: 0.25.0" in card


def test_an_early_or_hand_edited_manifest_reads_what_it_can(tmp_path: Path) -> None:
    # The first manifests had no dtype, device, threads, tools or best; a hand edit may break a value's type.
    early = {k: v for k, v in OLD.items() if k not in ("dtype", "device", "threads", "tools", "best")}
    out = _run_dir(tmp_path, {**early, "global_step": "eight", "eval_after": ["not", "scores"], "note": "mine"})
    manifest = runs.read_manifest(out)
    assert manifest is not None and manifest.status == "completed" and manifest.seed == 42
    assert manifest.global_step is None and manifest.eval_after is None and manifest.best is None
    assert ("pass@1", 0.25, None) in manifest.held_out()
    report = run_cli("report", out)
    assert report.exit_code == 0, report.output
    text = (out / runs.REPORT_SUMMARY).read_text(encoding="utf-8")
    assert "- status: **completed** at step 8" in text and "| pass@1 | 0.2500 | – |" in text  # the last log's step
    (out / runs.MANIFEST).write_text("[]", encoding="utf-8")
    assert runs.read_manifest(out) is None and runs.manifest_status(out) is None


def test_a_manifest_round_trips(tmp_path: Path) -> None:
    manifest = start_manifest("", seed=7, world_size=2)
    manifest.output_dir, manifest.data = str(tmp_path), {"train_rows": 64, "train_filter_detail": {"short": 3}}
    manifest.best = Best(step=2, metric="task/eval/accuracy", value=0.75, path="best")
    manifest.end("completed", 8, "")
    manifest.eval_before = Scores({"label": "before training", "prompts": 4, "k": 2, "pass@1": 0.5})
    runs.write_manifest(tmp_path, manifest)
    read = runs.read_manifest(tmp_path)
    assert read == manifest and read.version == MANIFEST_VERSION and read.eval_after is None
    written = json.loads((tmp_path / runs.MANIFEST).read_text(encoding="utf-8"))
    assert written["version"] == MANIFEST_VERSION and written["finished"] and "eval_after" not in written
    assert written["best"] == {"step": 2, "metric": "task/eval/accuracy", "value": 0.75, "path": "best"}

    # An old manifest read and written back (as marking a dead run `killed` does) keeps its shape and its
    # unknown keys, and stays unversioned.
    (tmp_path / "old").mkdir()
    old = _run_dir(tmp_path / "old", {**OLD, "note": "mine"})
    again = runs.read_manifest(old)
    assert again is not None
    runs.write_manifest(old, again)
    assert json.loads((old / runs.MANIFEST).read_text(encoding="utf-8")) == {**OLD, "note": "mine"}
    assert Manifest.parse({**OLD, "note": "mine"}) == again


def test_manifest_is_written_atomically_and_read_back(tmp_path: Path) -> None:
    from grpo_cli.runs.manifest import start_manifest

    manifest = start_manifest("", seed=7, world_size=2)
    assert manifest.status == "running" and manifest.package_version("python")
    runs.write_manifest(tmp_path, manifest)
    assert (read := runs.read_manifest(tmp_path)) is not None and read.seed == 7
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / runs.MANIFEST).write_text("{broken")
    assert runs.read_manifest(tmp_path) is None
