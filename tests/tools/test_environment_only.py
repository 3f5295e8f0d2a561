"""Environment-only training (issue 22): no `data:` rows and no `rewards:`, as TRL's `environment_factory` allows.

The environment serves each prompt from `reset()` and scores each rollout with `get_reward()`; what TRL would
refuse at trainer start (no reward source, no `max_steps`, routed environments without rows) is a validate
problem instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

DEMO = RECIPES / "environment-demo.yaml"


def _flat(result) -> str:
    assert "Traceback" not in result.output, result
    return " ".join(result.output.split())


def _copy(tmp_path: Path, drop_reward: bool = False, drop: str | None = None) -> Path:
    """The demo recipe and its environment in tmp_path; optionally without get_reward, or a recipe line."""
    (tmp_path / "tools").mkdir()
    source = (RECIPES / "tools" / "sum_desk.py").read_text(encoding="utf-8")
    if drop_reward:
        source = source.replace("def get_reward(self)", "def _not_a_reward(self)")
    (tmp_path / "tools" / "sum_desk.py").write_text(source, encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    text = DEMO.read_text(encoding="utf-8")
    recipe.write_text(re.sub(rf"\n  {drop}: .*", "", text) if drop else text, encoding="utf-8")
    return recipe


def test_the_demo_validates_with_no_data_and_no_rewards() -> None:
    result = run_cli("validate", DEMO)
    assert result.exit_code == 0, result
    flat = _flat(result)
    assert "no rows: the environment's reset() serves every prompt" in flat
    assert "the environment's get_reward x1" in flat
    assert "SumDesk: tools add, owns a reward (get_reward)" in flat


@pytest.mark.parametrize("drop,override,where,needles", [
    ("max_steps", [], "training.max_steps", ("no data rows", "Set `training.max_steps`")),
    (None, ["training.max_steps=0"], "training.max_steps", ("no data rows",)),
    ("params", ["environment.factory={a: tools/sum_desk.py:SumDesk, b: tools/sum_desk.py:SumDesk}"], "data",
     ("routed by each row's `environment` column", "no data rows")),
])
def test_what_trl_refuses_without_rows_is_a_validate_problem(tmp_path: Path, drop: str | None, override: list[str],
                                                             where: str, needles: tuple[str, ...]) -> None:
    result = run_cli("validate", _copy(tmp_path, drop=drop), *override)
    assert result.exit_code == 2, result
    flat = _flat(result)
    for needle in (where, *needles):
        assert needle in flat, f"{needle!r} not in:\n{result.output}"


def test_no_rewards_needs_an_environment_that_owns_the_reward(tmp_path: Path) -> None:
    result = run_cli("validate", _copy(tmp_path, drop_reward=True))
    assert result.exit_code == 2, result
    flat = _flat(result)
    assert "rewards" in flat and "SumDesk defines no get_reward" in flat and "No reward source provided" in flat


def test_no_rewards_and_no_environment_is_still_an_error(write_recipe, minimal_dir: Path) -> None:
    path = write_recipe("""
        model: {name_or_path: "bundled:tiny-tool"}
        data: {files: data.jsonl, prompt: {column: question}}
        rewards: []
        """)
    result = run_cli("validate", path)
    assert result.exit_code == 2, result
    assert "`rewards` is empty" in _flat(result)
    no_data = write_recipe("""
        model: {name_or_path: "bundled:tiny-tool"}
        rewards: [{name: accuracy}]
        """, name="no_data.yaml")
    result = run_cli("validate", no_data)
    assert result.exit_code == 2 and "data" in _flat(result), result


@pytest.mark.parametrize("data", ['{from_environment: true, files: x.jsonl}',
                                  '{from_environment: true, prompt: {template: "{q}", chat: true}}',
                                  '{from_environment: true, prompt: {column: q, chat: true}}',
                                  '{from_environment: true, eval_holdout: 0.1}'])
def test_environment_rows_refuse_keys_that_read_rows(tmp_path: Path, data: str) -> None:
    result = run_cli("validate", _copy(tmp_path), f"data={data}")
    assert result.exit_code == 2, result
    assert "from_environment: true" in _flat(result)


def test_check_rewards_and_eval_say_why_they_have_nothing_to_do() -> None:
    checked = run_cli("check-rewards", DEMO)
    assert checked.exit_code == 2, checked
    assert "grpo check-tools" in _flat(checked) and "get_reward" in _flat(checked)
    evaluated = run_cli("eval", DEMO)
    assert evaluated.exit_code == 2, evaluated
    assert "environment-only training" in _flat(evaluated)


@pytest.mark.slow
def test_environment_only_training_changes_weights_and_scores_what_the_environment_served(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    fast = ["training.max_steps=2", "training.per_device_train_batch_size=16", "training.num_generations=4",
            "training.logging_steps=1"]
    result = train(load_recipe(DEMO, fast), output_dir=out)
    assert result.status == "completed" and result.global_step == 2
    before = load_file(str(ROOT / "grpo_cli" / "assets" / "tiny-tool" / "model.safetensors"))
    after = load_file(str(out / "model.safetensors"))
    assert [k for k in before if not (before[k] == after[k]).all()], "training left every weight unchanged"
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["rewards/SumDesk/mean"] for r in logs if "reward" in r], "the environment's reward was not logged"
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert rows
    for row in rows:
        # The prompt is what reset() served; the reward is 1 exactly when `add` got those two numbers.
        served = re.fullmatch(r"user: (\d{3})\+(\d{3})", row["prompt"])
        assert served, row["prompt"]
        a, b = served.groups()
        calls = re.findall(r"add\(a=(\d+), b=(\d+)\)", row["completion"])
        right = (a, b) in calls or (b, a) in calls
        assert row["rewards"] == {"SumDesk": 1.0 if right else 0.0}, row
    assert json.loads((out / "manifest.json").read_text())["data"] == {"environment_rows": 16}


def test_environment_rows_can_start_from_constant_text_and_a_system_prompt() -> None:
    from grpo_cli import load_recipe
    from grpo_cli.data import prepare_data

    recipe = load_recipe(DEMO, ["data.from_environment=true", "data.prompt.template='Add {{exactly}}:'",
                                "data.prompt.chat=true", "data.prompt.system_prompt=Use the tool."])
    rows = prepare_data(recipe).train
    assert len(rows) == 64  # one generation batch: 8 prompts x 8 generations
    assert rows[0]["prompt"] == [{"role": "system", "content": "Use the tool."},
                                 {"role": "user", "content": "Add {exactly}:"}]
    shown = _flat(run_cli("validate", DEMO, "data.from_environment=true", "data.prompt.template='Add {{exactly}}:'",
                "data.prompt.chat=true", "data.prompt.system_prompt=Use the tool."))
    assert "'Add {exactly}:' after the system" in shown
