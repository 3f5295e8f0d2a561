"""`sampling.dynamic` (DAPO dynamic sampling): the hook pinned to the installed TRL, real training on the bundled
model (flat groups are not trained, the batch is refilled, LoRA composes, several processes agree), the strategies'
price read from a finished run, and a recipe without `sampling:` training exactly as before. What `grpo validate`
refuses and prints otherwise: tests/planning/test_dynamic_sampling_plan.py."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo_cli.training.dynamic_sampling import PREFIX
from grpo_cli.validation.sampling_checks import expected_filler
from tests.conftest import RECIPES, ROOT, health_events, plan_text, run_cli

DEMO = RECIPES / "demo.yaml"
STEPS = ["training.max_steps=4", "training.per_device_train_batch_size=16", "training.num_generations=4",
         "training.logging_steps=1", "training.temperature=0.7", "eval.before_after=false"]


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _train(out: Path, *overrides: str) -> list[dict]:
    from grpo_cli import load_recipe, train

    result = train(load_recipe(DEMO, [*STEPS, *overrides]), output_dir=out)
    assert result.status == "completed"
    return [r for r in _records(out) if "reward" in r]


def test_the_hook_matches_the_installed_trl() -> None:
    """What dynamic sampling and the zero-advantage skip rely on in TRL's GRPOTrainer: a change fails here."""
    from trl import GRPOTrainer

    from grpo_cli.training.group_rows import PADDING, RECOMPUTED

    def params(name: str) -> list[str]:
        return list(inspect.signature(getattr(GRPOTrainer, name)).parameters)

    assert params("_generate_and_score_completions") == ["self", "inputs"]
    assert params("_calculate_rewards") == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    assert params("compute_loss")[:3] == ["self", "model", "inputs"]
    prepare = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "self._generate_and_score_completions(generation_batch)" in prepare  # called through the instance
    assert "split_tensor_dict(generation_batch, self.args.steps_per_generation)" in prepare
    # every process's rewards are gathered before advantages: where several processes agree on one keep-mask
    assert "rewards_per_func = gather(rewards_per_func)" in inspect.getsource(GRPOTrainer._calculate_rewards)
    score = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "self._calculate_rewards(inputs, prompts, completions, completion_ids_list)" in score
    assert "rewards.view(-1, num_generations)" in score  # groups are consecutive rows
    first = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch"}
    assert all(f'"{key}":' in score for key in first)  # the output dict's literal keys
    keys = set(re.findall(r'output\["(\w+)"\]', score)) | first
    images = {"pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes",
              "token_type_ids", "mm_token_type_ids", "image_position_ids", "num_images", "num_tiles"}
    assert keys - images <= set(PADDING) | set(RECOMPUTED), keys - images - set(PADDING) - set(RECOMPUTED)
    loss = inspect.getsource(GRPOTrainer._compute_loss)  # the normalisers zero_advantage.py rescales
    assert 'inputs["num_items_in_batch"].clamp(min=1.0)' in loss
    assert "(per_token_loss.size(0) * self.max_completion_length)" in loss
    assert "/ mask.sum().clamp(min=1.0)" in loss and "/ mask.sum(-1).clamp(min=1.0)).mean()" in loss


def _fake_trainer(rewards: list[list[float]]) -> SimpleNamespace:
    import torch

    from grpo_cli.training.dynamic_sampling import DynamicSampler

    trainer = SimpleNamespace(num_generations=4, reward_func_names=["accuracy", "fmt"],
                              reward_weights=torch.tensor([1.0, 0.5]))
    sampler = DynamicSampler(trainer, "accuracy", 0.0, 3, seed=0)
    sampler.last_rewards = torch.tensor(rewards)
    return SimpleNamespace(trainer=trainer, sampler=sampler)


def test_the_filter_reads_the_chosen_reward_not_the_total() -> None:
    # group 0: all wrong, but the format reward differs (a phantom signal in the total); group 1: mixed accuracy
    rows = [[0.0, 0.0], [0.0, 1.0], [0.0, 0.5], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0]]
    fake = _fake_trainer(rows)
    assert fake.sampler.split_groups() == ([1], [0])
    fake.sampler.metric = "reward"
    assert fake.sampler.split_groups() == ([0, 1], [])
    fake.sampler.metric, fake.sampler.min_std = "accuracy", 0.6  # accuracy's std in group 1 is 0.5
    assert fake.sampler.split_groups() == ([], [0, 1])


@pytest.mark.slow
def test_dynamic_sampling_trains_no_flat_group_where_plain_grpo_does(tmp_path: Path) -> None:
    plain = _train(tmp_path / "plain")
    assert max(r["frac_reward_zero_std"] for r in plain) > 0, "no flat group to drop: the test proves nothing"
    assert not any(k.startswith("dynamic_sampling/") for r in plain for k in r)
    dynamic = _train(tmp_path / "dynamic", "sampling.dynamic={max_rounds: 6}")
    assert all(r["dynamic_sampling/zero_std_trained"] == 0 for r in dynamic)
    assert sum(r["dynamic_sampling/dropped_groups"] for r in dynamic) > 0
    assert max(r["dynamic_sampling/rounds"] for r in dynamic) > 1  # refilled from further prompts
    for r in dynamic:  # four groups trained per step: every dropped one was replaced by a generated one
        assert r["dynamic_sampling/generated_groups"] >= 4 + r["dynamic_sampling/dropped_groups"]
    report = (tmp_path / "dynamic" / "report.md").read_text()
    assert "dynamic_sampling/zero_std_trained" in report


@pytest.mark.slow
def test_one_round_filters_and_a_short_batch_is_filled_with_zero_advantage_groups(tmp_path: Path) -> None:
    logs = _train(tmp_path / "once", "sampling.dynamic={max_rounds: 1, metric: accuracy}",
                  "sampling.skip_zero_advantage=true")
    assert all(r["dynamic_sampling/rounds"] == 1 and r["dynamic_sampling/generated_groups"] == 4 for r in logs)
    for r in logs:  # what could not be refilled is trained as filler, with zero advantage, and said so
        assert r["dynamic_sampling/zero_std_trained"] == pytest.approx(r["dynamic_sampling/dropped_groups"] / 4)
        assert r["zero_advantage/skipped"] == pytest.approx(r["frac_reward_zero_std"])
    assert any(r["dynamic_sampling/zero_std_trained"] > 0 for r in logs)


@pytest.fixture(scope="module")
def oversampled(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One real demo run with `strategy: oversample` (x2): its logs, each training call of TRL's
    `_generate_and_score_completions` (step, rows) and the advantages of every row the loss trained."""
    from trl import GRPOTrainer

    out, calls, trained = tmp_path_factory.mktemp("oversample") / "run", [], []
    score, loss = GRPOTrainer._generate_and_score_completions, GRPOTrainer.compute_loss

    def counted_score(self, inputs):  # TRL's method, as the sampler's wrapper calls it
        if self.model.training:
            calls.append((self.state.global_step, len(inputs)))
        return score(self, inputs)

    def recorded_loss(self, model, inputs, *args, **kwargs):
        trained.append((self.state.global_step, inputs["advantages"].tolist()))
        return loss(self, model, inputs, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GRPOTrainer, "_generate_and_score_completions", counted_score)
        patch.setattr(GRPOTrainer, "compute_loss", recorded_loss)
        logs = _train(out, "sampling.dynamic={strategy: oversample, oversample: 2}")
    return SimpleNamespace(out=out, logs=logs, calls=calls, trained=trained)


@pytest.mark.slow
def test_oversample_generates_once_per_step_and_trains_a_full_batch_of_kept_groups(oversampled) -> None:
    logs, calls = oversampled.logs, oversampled.calls
    assert [r["step"] for r in logs] == [1, 2, 3, 4]
    # one call of TRL's generation per step, for 2 x the batch's 4 prompts (x 4 completions): never a second round
    assert calls == [(step, 32) for step in range(4)]
    assert all(r["dynamic_sampling/rounds"] == 1 and r["dynamic_sampling/generated_groups"] == 8 for r in logs)
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0, "nothing dropped: the test proves nothing"
    for step in range(4):  # the loss saw the configured batch (16 rows), flat groups only as logged filler
        rows = [a for s, advantages in oversampled.trained if s == step for a in advantages]
        assert len(rows) == 16
        # TRL shuffles rows before the loss; with a 0/1 reward only a flat group's rows have advantage exactly 0
        filler = sum(a == 0 for a in rows) / 16
        assert filler == pytest.approx(logs[step]["dynamic_sampling/zero_std_trained"])
    # flat groups were generated (TRL's share counts all 8 groups), far fewer trained
    assert sum(r["dynamic_sampling/zero_std_trained"] for r in logs) < sum(r["frac_reward_zero_std"] for r in logs) / 2
    assert {k for r in logs for k in r if k.startswith(PREFIX)} == {PREFIX + k for k in (
        "dropped_groups", "rounds", "generated_groups", "zero_std_trained")}


@pytest.mark.slow
def test_validate_prices_both_strategies_from_a_finished_run(oversampled) -> None:
    zero = sum(r["frac_reward_zero_std"] for r in oversampled.logs) / len(oversampled.logs)
    assert 0 < zero < 1, "a run without flat groups (or only flat ones) prices nothing"
    filler = expected_filler(8, 4, 1 - zero)
    for recipe_says, chosen, other in (
            ("sampling.dynamic={strategy: oversample}", "strategy oversample x2, never a second round",
             "strategy: refill (3 rounds) instead: about"),
            ("sampling.dynamic={max_rounds: 3}", "up to 3 generation rounds per batch",
             "strategy: oversample (x2) instead: +100% generation per step, in one round of 16 groups for 8")):
        result = run_cli("validate", DEMO, recipe_says, f"output.dir={oversampled.out}")
        assert result.exit_code == 0, result.output
        text = plan_text(result.output)
        assert chosen in text and other in text, text
        assert f"last run had {zero:.0%} zero-std groups: " in text
        assert f"about +{zero / (1 - zero):.0%} generation per step (at most +200%)" in text
    text = plan_text(run_cli("validate", DEMO, *STEPS, "sampling.dynamic={strategy: oversample, oversample: 2}",
                              f"output.dir={oversampled.out}").output)
    assert f"+100% generation per step, in one round of 8 groups for 4, about {filler:.0%} of trained" in text


@pytest.mark.slow
def test_dynamic_sampling_composes_with_lora(tmp_path: Path) -> None:
    out = tmp_path / "lora"
    result = run_cli("train", DEMO, *STEPS, "model.lora.r=4", "model.lora.alpha=8", "model.lora.dropout=0.0",
                     "sampling.dynamic={max_rounds: 4}", "-o", out)
    assert result.exit_code == 0, result.output
    assert (out / "adapter_model.safetensors").exists()
    logs = [r for r in _records(out) if "reward" in r]
    assert all(r["dynamic_sampling/zero_std_trained"] == 0 for r in logs)


@pytest.mark.slow
def test_a_recipe_without_sampling_trains_exactly_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    import grpo_cli.training.hooks.table as hooks_table

    with_feature_code = _train(tmp_path / "now", "training.max_steps=3")
    skipped: list[str] = []  # where the hook list calls them, so the second run is really without them
    monkeypatch.setattr(hooks_table, "attach_dynamic_sampling",
                        lambda trainer, recipe, console=None: skipped.append("dynamic"))
    monkeypatch.setattr(hooks_table, "attach_zero_advantage_skip", lambda trainer: skipped.append("zero"))
    before = _train(tmp_path / "before", "training.max_steps=3")
    assert skipped == ["dynamic"], "the sampling hook was not replaced: the hook list no longer calls it"

    def same(r: dict) -> dict:
        return {k: v for k, v in r.items() if not k.startswith("time") and k != "step_time"}  # clocks

    assert [same(r) for r in with_feature_code] == [same(r) for r in before]
    a, b = load_file(str(tmp_path / "now" / "model.safetensors")), load_file(str(tmp_path / "before" /
                                                                                   "model.safetensors"))
    import torch

    assert all(torch.equal(a[k], b[k]) for k in a)


SPY = '''
import json, os


def spy(completions, prompts, log, **kwargs):
    """Record which process scored which prompts (every generation round calls it), and score nothing."""
    with open(log, "a") as fh:
        fh.write(json.dumps({"rank": int(os.environ.get("RANK", "0")), "prompts": list(prompts)}) + "\\n")
    return [0.0] * len(completions)
'''


def _two_processes(tmp_path: Path, name: str, profile: str = "ddp",
                   dynamic: str = "{max_rounds: 6}") -> tuple[list[dict], list[dict]]:
    """The demo on 2 CPU processes (the ddp profile, gloo, unless another is named) with dynamic sampling: its
    training logs and, per reward call, which process scored which prompts."""
    import os
    import subprocess
    import sys

    (tmp_path / "spy.py").write_text(SPY)
    log, out = tmp_path / f"{name}.jsonl", tmp_path / name
    rewards = (f"rewards=[{{name: accuracy, params: {{answer_format: first_number}}}}, "
               f"{{function: {tmp_path / 'spy.py'}:spy, weight: 0.0, params: {{log: {log}}}}}]")
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(DEMO), "--profile", profile, "--num-processes", "2",
           "-o", str(out), *STEPS, "training.max_steps=3", "training.per_device_train_batch_size=8", rewards,
           f"sampling.dynamic={dynamic}"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in _records(out) if "reward" in r], calls


@pytest.mark.slow
def test_dynamic_sampling_on_two_processes_agrees_on_every_round(tmp_path: Path) -> None:
    logs, calls = _two_processes(tmp_path, "first")
    assert [r["step"] for r in logs] == [1, 2, 3]
    assert {k for r in logs for k in r if k.startswith("dynamic_sampling/")} == {
        "dynamic_sampling/dropped_groups", "dynamic_sampling/rounds", "dynamic_sampling/generated_groups",
        "dynamic_sampling/zero_std_trained"}
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0, "nothing dropped: the test proves nothing"
    assert max(r["dynamic_sampling/rounds"] for r in logs) > 1  # refilled
    assert sum(r["dynamic_sampling/zero_std_trained"] for r in logs) / len(logs) <= 0.1
    for r in logs:  # 2 processes x 2 groups trained a step: each dropped group was replaced by a generated one
        assert r["dynamic_sampling/generated_groups"] >= (4 * (1 - r["dynamic_sampling/zero_std_trained"])
                                                          + r["dynamic_sampling/dropped_groups"])
    ranks = {rank: [c["prompts"] for c in calls if c["rank"] == rank] for rank in (0, 1)}
    # every round ran on both processes, with as many completions on each (TRL gathers the rewards)
    assert [len(p) for p in ranks[0]] == [len(p) for p in ranks[1]]
    assert len(ranks[0]) == sum(r["dynamic_sampling/rounds"] for r in logs)
    firsts, at = set(), 0
    for r in logs:
        firsts.add(at)
        at += int(r["dynamic_sampling/rounds"])
    refills = [{i: set(p) for i, p in enumerate(ranks[rank]) if i not in firsts} for rank in (0, 1)]
    assert refills[0], "no refill round"
    drawn = [set().union(*refills[rank].values()) for rank in (0, 1)]
    assert not drawn[0] & drawn[1], "both processes refilled with the same prompts"
    _, again = _two_processes(tmp_path, "again")  # the same seed draws the same refill prompts on each process
    assert all([c["prompts"] for c in again if c["rank"] == rank] == ranks[rank] for rank in (0, 1))


@pytest.mark.slow
def test_oversample_on_two_processes_generates_once_per_step_with_distinct_prompts(tmp_path: Path) -> None:
    logs, calls = _two_processes(tmp_path, "oversample", dynamic="{strategy: oversample, oversample: 2}")
    assert [r["step"] for r in logs] == [1, 2, 3]
    assert all(r["dynamic_sampling/rounds"] == 1 for r in logs)
    # 2 processes x (2 groups of the batch + 2 more): one reward call per process and step, 16 completions each
    assert all(r["dynamic_sampling/generated_groups"] == 8 for r in logs)
    sizes = {rank: [len(c["prompts"]) for c in calls if c["rank"] == rank] for rank in (0, 1)}
    assert sizes[0] == sizes[1] == [16, 16, 16]
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0, "nothing dropped: the test proves nothing"
    extra = [{p for c in calls if c["rank"] == rank for p in c["prompts"][8:]} for rank in (0, 1)]
    assert extra[0] and not extra[0] & extra[1], "both processes oversampled the same prompts"
    for r in logs:  # the filler share is what the kept groups of each process could not fill
        assert 0 <= r["dynamic_sampling/zero_std_trained"] <= r["frac_reward_zero_std"]


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["zero2", "zero3", "fsdp"])
def test_dynamic_sampling_under_the_sharding_profiles(tmp_path: Path, profile: str) -> None:
    logs, calls = _two_processes(tmp_path, profile, profile)
    assert [r["step"] for r in logs] == [1, 2, 3]
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0, "nothing dropped: the test proves nothing"
    assert max(r["dynamic_sampling/rounds"] for r in logs) > 1
    assert sum(r["dynamic_sampling/zero_std_trained"] for r in logs) / len(logs) <= 0.1
    sizes = {rank: [len(c["prompts"]) for c in calls if c["rank"] == rank] for rank in (0, 1)}
    assert sizes[0] == sizes[1] and len(sizes[0]) == sum(r["dynamic_sampling/rounds"] for r in logs)


@pytest.mark.slow
def test_rounds_that_drop_every_group_are_said_and_warned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grpo_cli.training.dynamic_sampling as dynamic

    monkeypatch.setattr(dynamic, "SAY_EVERY_S", 0.0)  # say every round: a fast CPU step is never long
    (tmp_path / "flat.py").write_text("def flat(completions, **kwargs):\n    return [0.0 for _ in completions]\n")
    out = tmp_path / "run"
    result = run_cli("train", DEMO, *STEPS, "training.max_steps=3", "sampling.dynamic={max_rounds: 3}",
                     f"rewards=[{{function: {tmp_path / 'flat.py'}:flat}}]", "-o", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for step in (1, 2, 3):
        for round_ in (2, 3):
            assert f"dynamic sampling, step {step}: round {round_} of 3, 0 of 4 groups kept so far" in text, text
    assert "rounds 3" in text  # the per-step line
    warned = [e for e in health_events(out) if e["guard"] == "dynamic_sampling"]
    assert [e["step"] for e in warned] == [2]  # once, when the second batch in a row kept nothing
    assert "every group of the last 2 generation batches was dropped after 3 rounds each" in warned[0]["message"]
    assert "health warn dynamic_sampling at step 2" in text
