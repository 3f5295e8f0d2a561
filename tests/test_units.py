"""Unit tests of the pieces the CLI tests reach only indirectly: batching, hints, TRL fields, runs, paths,
probes. Where a rule mirrors TRL, the test holds it against the real TRL so it stays honest when TRL changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from grpo_cli import paths, runs
from grpo_cli.errors import GrpoError, did_you_mean
from grpo_cli.planning.batching import plan_batches
from grpo_cli.recipe.hints import unknown_key_hint
from grpo_cli.recipe.schema.training import TrainingSection
from grpo_cli.recipe.trl_fields import accepted_values, grpo_config_fields, json_schema_for

# ---------------------------------------------------------------------------------------------- batching

BATCH_CASES = [  # (per_device, grad_accum, num_generations, steps_per_generation, generation_batch_size)
    (8, 1, 8, None, None), (4, 1, 8, None, None), (4, 2, 8, None, None), (3, 1, 4, None, None),
    (6, 1, 4, None, None), (4, 1, 8, 2, None), (4, 1, 8, None, 16), (4, 1, 8, None, 12),
    (4, 1, 8, 2, 16), (8, 1, 1, None, None), (6, 1, 4, None, 24), (6, 3, 4, None, None),
]


def _batch_values(per_device: int, accum: int, gens: int, spg: int | None, gbs: int | None) -> dict:
    return {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": accum,
            "num_generations": gens, "steps_per_generation": spg, "generation_batch_size": gbs}


def _training(*case: int | None) -> TrainingSection:
    """The recipe's training section holding these batch values (unset ones left to TRL's defaults)."""
    return TrainingSection.model_validate({k: v for k, v in _batch_values(*case).items() if v is not None})


@pytest.mark.parametrize("case", BATCH_CASES)
def test_batch_rules_agree_with_trl(case, tmp_path) -> None:
    """plan_batches rejects exactly what TRL's GRPOConfig rejects (one process: what GRPOConfig can see here)."""
    from trl import GRPOConfig

    try:
        plan, problems = plan_batches(_training(*case), 1, has_eval=False)
    except ValidationError as exc:  # the schema rejects some (num_generations < 2) before the batch rules
        plan, problems = None, [exc]
    kwargs = {k: v for k, v in _batch_values(*case).items() if v is not None}
    try:
        GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **kwargs)
        trl_rejects = False
    except ValueError:
        trl_rejects = True
    assert bool(problems) == trl_rejects, (case, [str(p) for p in problems])
    if plan is not None and not problems:
        assert plan.generation_batch_size % plan.num_generations == 0


def test_batch_rules_use_the_real_world_size() -> None:
    """3 per device x 2 processes = 6 completions, not a multiple of 4 generations; 2 x 2 = 4 is."""
    assert plan_batches(_training(3, 1, 4, None, None), 2, has_eval=False)[1]
    assert not plan_batches(_training(2, 1, 4, None, None), 2, has_eval=False)[1]


def test_batch_problem_names_the_key_and_a_fix_that_works() -> None:
    _, problems = plan_batches(_training(3, 1, 4, None, None), 1, has_eval=False)
    assert problems and problems[0].where == "training.num_generations"
    fix = problems[0].fix
    assert "per_device_train_batch_size: 4" in fix
    _, fixed = plan_batches(_training(4, 1, 4, None, None), 1, has_eval=False)
    assert fixed == []


# ---------------------------------------------------------------------------------------------- hints

def test_hints_map_old_names_and_typos() -> None:
    assert "use `training.beta` instead" in unknown_key_hint("kl_coef", ["beta"], "training.")
    assert "`training.max_completion_length`" in unknown_key_hint("max_new_tokens", [], "training.")
    assert did_you_mean("num_generaions", ["num_generations", "beta"]) == "num_generations"
    assert did_you_mean("zzz", ["num_generations"]) is None
    assert "training.beta" in unknown_key_hint("beta", ["model", "data"], "")


# ---------------------------------------------------------------------------------------------- TRL fields

def test_trl_fields_are_read_from_the_installed_grpo_config() -> None:
    from dataclasses import fields

    from trl import GRPOConfig

    ours = grpo_config_fields()
    real = {f.name for f in fields(GRPOConfig)}
    assert {"beta", "num_generations", "loss_type", "max_completion_length"} <= set(ours)
    assert set(ours) <= real and len(real - set(ours)) <= 3, sorted(real - set(ours))
    assert ours["beta"].default == GRPOConfig.beta if hasattr(GRPOConfig, "beta") else True
    lr_sched = accepted_values(ours["lr_scheduler_type"])
    assert lr_sched and "cosine" in lr_sched
    assert json_schema_for(ours["num_generations"])  # a schema the editor can use


# ---------------------------------------------------------------------------------------------- runs

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


def test_manifest_is_written_atomically_and_read_back(tmp_path: Path) -> None:
    from grpo_cli.runs.manifest import start_manifest

    manifest = start_manifest("", seed=7, world_size=2)
    assert manifest.status == "running" and manifest.package_version("python")
    runs.write_manifest(tmp_path, manifest)
    assert (read := runs.read_manifest(tmp_path)) is not None and read.seed == 7
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / runs.MANIFEST).write_text("{broken")
    assert runs.read_manifest(tmp_path) is None


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


# ---------------------------------------------------------------------------------------------- paths

def test_one_rule_for_references(tmp_path: Path, monkeypatch) -> None:
    recipe_dir, cwd = tmp_path / "recipes", tmp_path / "cwd"
    for d in (recipe_dir / "m", cwd / "m", cwd / "only_here"):
        d.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    assert paths.resolve("bundled:tiny-arith", recipe_dir) == paths.ASSETS_DIR / "tiny-arith"
    assert paths.resolve("m", recipe_dir) == recipe_dir / "m"  # the recipe's directory first
    assert paths.resolve("only_here", recipe_dir) == Path.cwd() / "only_here"  # then the current one
    assert paths.resolve("m") == Path.cwd() / "m"  # flags: the current directory
    assert paths.resolve("missing", recipe_dir) == recipe_dir / "missing"  # errors name the recipe's place
    assert paths.local_dir("Qwen/Qwen2.5-0.5B-Instruct", recipe_dir) is None  # a hub id
    assert paths.local_dir("./models/not-yet", recipe_dir) == recipe_dir / "models/not-yet"  # looks like a path


def test_hub_ids_are_told_from_paths() -> None:
    assert paths.is_hub_id("Qwen/Qwen2.5-0.5B-Instruct") and paths.is_hub_id("gpt2")
    assert not paths.is_hub_id("gpt2", owner=True)  # a model card's base_model needs owner/name
    for local in ("./models/x", "/abs/model", "~/m", "bundled:tiny-arith", "a/b/c", "models\\x"):
        assert not paths.is_hub_id(local), local


def test_hub_cache_lookup_by_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snap = tmp_path / "models--org--name" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (tmp_path / "models--org--name" / "refs").mkdir()
    (tmp_path / "models--org--name" / "refs" / "main").write_text("abc")
    assert paths.hub_cache_file("org/name", "config.json") is None
    (snap / "config.json").write_text("{}")
    assert paths.hub_cache_file("org/name", "config.json") == str(snap / "config.json")


# ---------------------------------------------------------------------------------------------- probes

def test_probes_follow_the_recipe_answer_style() -> None:
    from grpo_cli.checking.probes import ProbeStyle, make_probes, wrong_answer
    from grpo_cli.rewards.builtins.answers import accuracy

    assert wrong_answer("41") == "42" and wrong_answer("x") == "0"
    for style in (ProbeStyle(tags=True), ProbeStyle(tags=False, answer_format="gsm8k"),
                  ProbeStyle(tags=False, answer_format="boxed")):
        probes = dict(make_probes({"answer": "41"}, style, "41", budget_chars=200))
        assert probes["reference"] != probes["wrong"]
        fmt = "answer_tag" if style.tags else style.answer_format
        scores = accuracy([probes["reference"], probes["wrong"], probes["empty"]], answer=["41"] * 3,
                          answer_format=fmt)
        assert scores == [1.0, 0.0, 0.0], (style, probes)
        assert len(probes["overlong"]) > 200


def test_the_expected_filler_of_oversampling() -> None:
    """`grpo validate`'s price of `strategy: oversample`: E[max(T - kept, 0)] / T, kept ~ Binomial(n, keep)."""
    from grpo_cli.validation.sampling_checks import expected_filler

    assert expected_filler(8, 4, 1.0) == 0 and expected_filler(8, 4, 0.0) == 1
    assert expected_filler(1, 1, 0.5) == pytest.approx(0.5)
    # 2 of 4 drawn groups kept with p = 0.5, batch of 2: short by 2 w.p. 1/16, by 1 w.p. 4/16 -> (2 + 4) / 16 / 2
    assert expected_filler(4, 2, 0.5) == pytest.approx(6 / 32)
