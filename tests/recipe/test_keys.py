"""Recipe keys: old names and typos get a hint, and the `training` fields are read from the installed TRL's
GRPOConfig (names, accepted values, JSON schema)."""

from __future__ import annotations

from grpo_cli.errors import did_you_mean
from grpo_cli.recipe.hints import unknown_key_hint
from grpo_cli.recipe.trl_fields import accepted_values, grpo_config_fields, json_schema_for


def test_hints_map_old_names_and_typos() -> None:
    assert "use `training.beta` instead" in unknown_key_hint("kl_coef", ["beta"], "training.")
    assert "`training.max_completion_length`" in unknown_key_hint("max_new_tokens", [], "training.")
    assert did_you_mean("num_generaions", ["num_generations", "beta"]) == "num_generations"
    assert did_you_mean("zzz", ["num_generations"]) is None
    assert "training.beta" in unknown_key_hint("beta", ["model", "data"], "")


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
