"""The run directory's rules, without training: the latest complete checkpoint, step logs cut back to it, the
overwrite and resume rules, a replaced run set aside and restored, one writer per directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grpo_cli import runs
from grpo_cli.errors import GrpoError


def _checkpoint(path: Path, step: int) -> Path:
    """A complete checkpoint as transformers leaves it: weights, then trainer_state.json last."""
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"weights")
    (path / runs.TRAINER_STATE).write_text(json.dumps({"global_step": step}))
    return path


def test_latest_checkpoint_and_run_detection(tmp_path: Path) -> None:
    assert runs.latest_checkpoint(tmp_path) is None and not runs.is_run_dir(tmp_path)
    for n in (2, 10, 9):
        _checkpoint(tmp_path / f"checkpoint-{n}", n)
    (tmp_path / "checkpoint-x").mkdir()
    (tmp_path / "checkpoint-11").write_text("a file, not a checkpoint")
    (tmp_path / "checkpoint-12").mkdir()  # a save cut short: no trainer_state.json
    (tmp_path / "checkpoint-12" / "model.safetensors").write_bytes(b"weights")
    assert runs.latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
    newest, skipped = runs.resumable_checkpoints(tmp_path)
    assert newest == tmp_path / "checkpoint-10" and [p.name for p, _ in skipped] == ["checkpoint-12"]
    assert "trainer_state.json" in skipped[0][1]
    (tmp_path / "checkpoint-10" / runs.TRAINER_STATE).write_text('{"global_st')  # truncated mid-write
    assert runs.latest_checkpoint(tmp_path) == tmp_path / "checkpoint-9"
    assert runs.is_run_dir(tmp_path)
    assert runs.checkpoint_step(tmp_path / "checkpoint-10") == 10 and runs.checkpoint_step(tmp_path) is None


def test_step_logs_are_cut_back_to_the_checkpoint(tmp_path: Path) -> None:
    records = [{"step": s, "reward": 0.5} for s in (1, 2, 3, 4)] + [{"step": 2, "eval_reward": 1.0}]
    (tmp_path / runs.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 5, "rew')
    assert runs.truncate_step_logs(tmp_path, 2) == 3  # steps 3, 4 and the line the kill cut short
    kept = [json.loads(line) for line in (tmp_path / runs.METRICS).read_text().splitlines()]
    assert [r["step"] for r in kept] == [1, 2, 2]


def test_overwrite_rules(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert runs.plan_output_dir(out, resume=None, force=False, policy="error") == runs.OutputPlan()
    out.mkdir()
    (out / runs.LOCK).write_text("")  # grpo's own lock file does not make a directory a previous run
    assert runs.plan_output_dir(out, resume=None, force=False, policy="error") == runs.OutputPlan()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(GrpoError, match="not empty"):
        runs.plan_output_dir(out, resume=None, force=False, policy="error")
    with pytest.raises(GrpoError, match="does not look like a grpo run"):
        runs.plan_output_dir(out, resume=None, force=True, policy="error")
    (out / runs.MANIFEST).write_text(json.dumps({"status": "completed"}))
    assert runs.plan_output_dir(out, resume=None, force=True, policy="error").replace
    with pytest.raises(GrpoError, match="no complete checkpoint"):
        runs.plan_output_dir(out, resume=True, force=False, policy="error")
    _checkpoint(out / "checkpoint-3", 3)
    (out / "checkpoint-5").mkdir()
    plan = runs.plan_output_dir(out, resume=True, force=False, policy="error")
    assert plan.checkpoint == out / "checkpoint-3" and not plan.replace and plan.skipped[0][0].name == "checkpoint-5"
    with pytest.raises(GrpoError, match="can be resumed from: no trainer_state.json"):
        runs.plan_output_dir(out, resume=str(out / "checkpoint-5"), force=False, policy="error")


def test_set_aside_restores_or_discards_the_previous_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / runs.MANIFEST).write_text("old")
    (out / runs.LOCK).write_text("")
    aside = runs.SetAside(out)
    assert sorted(p.name for p in out.iterdir()) == [runs.LOCK]  # the lock stays with the directory
    (out / runs.MANIFEST).write_text("new")
    aside.restore()
    assert (out / runs.MANIFEST).read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    aside = runs.SetAside(out)
    aside.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and not (out / runs.MANIFEST).exists()


def test_a_second_lock_is_refused_and_a_dead_holder_is_detected(tmp_path: Path) -> None:
    from grpo_cli.runs.lock import RunLock, lock_is_free, mark_if_killed

    out = tmp_path / "run"
    with RunLock(out).acquire():
        with pytest.raises(GrpoError, match=f"in use by another run \\(pid {os.getpid()} on host"):
            RunLock(out).acquire()
        (out / runs.MANIFEST).write_text(json.dumps({"status": "running"}))
        assert not lock_is_free(out) and mark_if_killed(out) is None  # a live run is not marked
    assert not (out / runs.LOCK).exists() and lock_is_free(out)
    assert (killed := mark_if_killed(out)) is not None and killed.status == "killed"
    assert runs.manifest_status(out) == "killed"
    fresh = tmp_path / "fresh"
    RunLock(fresh).acquire().release()
    assert not fresh.exists()  # a lock that wrote nothing leaves nothing behind
