"""TRL's batch arithmetic as `grpo validate` plans it: the rules reject exactly what TRL's GRPOConfig rejects, count
the real world size, and name the key with a fix that works."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from grpo_cli.planning.batching import plan_batches
from grpo_cli.recipe.schema.training import TrainingSection

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
