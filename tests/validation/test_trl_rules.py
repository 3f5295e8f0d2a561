"""Every TRL 1.16 rejection a recipe decides is caught by `grpo validate`, and TRL really rejects it.

Each row names a TRL raise (or warning) site and recipe overrides on recipes/demo.yaml that trigger it.
`validate` must exit 2 naming the key (warning rows: exit 0 with a warning naming it), without importing
torch; and building the real GRPOConfig -- and GRPOTrainer for trainer rows -- through grpo's own training
code from the same recipe must raise (or log TRL's warning), so the table follows TRL releases.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grpo_cli.validation.trl_rules import RULES
from tests.conftest import RECIPES, ROOT, run_cli

DEMO = RECIPES / "demo.yaml"


@dataclass(frozen=True)
class Row:
    rule: str  # a RULES name, or the grpo check that covers the site
    site: str = "config"  # config: GRPOConfig raises; trainer: GRPOTrainer.__init__
    overrides: tuple[str, ...] = ()
    key: str = ""
    expect: str = "raise"  # raise | warn
    says: str = ""  # a fragment of TRL's own message, so an unrelated error cannot pass the row
    config_extra: dict[str, Any] = field(default_factory=dict)  # keys a recipe cannot pass through grpo's path


LORA = ("model.lora.r=4",)
VLLM = ("launch.profile=single", "launch.vllm.mode=colocate")
TABLE = [
    # trl/trainer/grpo_config.py GRPOConfig.__post_init__
    Row("log_completions_hub_repo", "config", ("training.log_completions_hub_repo=org/name",),
        "training.log_completions_hub_repo", says="log_completions is False"),
    Row("auto_find_batch_size", "config", ("training.auto_find_batch_size=true",), "training.auto_find_batch_size",
        says="auto_find_batch_size is not supported"),
    Row("is_clip_order", "config", ("training.vllm_importance_sampling_clip_min=5.0",),
        "training.vllm_importance_sampling_clip_min", says="must be less than vllm_importance_sampling_clip_max"),
    Row("is_truncate_bounds", "config", ("training.vllm_importance_sampling_mode=token_truncate",
                                         "training.vllm_importance_sampling_clip_max=null"),
        "training.vllm_importance_sampling_mode", says="At least one of"),
    Row("batching: generation_batch_size and steps_per_generation both set", "config",
        ("training.generation_batch_size=64", "training.steps_per_generation=2"), "training.generation_batch_size",
        says="can not be both configured"),
    Row("batching: generation_batch_size % global batch", "config", ("training.generation_batch_size=96",),
        "training.generation_batch_size", says="must be divisible by the global batch size"),
    Row("batching: generation batch % num_generations", "config", ("training.num_generations=7",),
        "training.num_generations", says="must be divisible by num_generations"),
    Row("batching: global eval batch % num_generations_eval", "config",
        ("training.eval_strategy=steps", "training.eval_steps=10", "training.per_device_eval_batch_size=12"),
        "training.per_device_eval_batch_size", says="global eval batch size"),
    Row("schema bound: num_generations < 2", "config", ("training.num_generations=1",), "training.num_generations",
        says="at least 2 generations", config_extra={"num_generations": 1}),
    # trl/trainer/grpo_trainer.py GRPOTrainer.__init__
    Row("sync_ref_model_beta", "trainer", ("training.sync_ref_model=true",), "training.sync_ref_model",
        says="while `beta=0.0`"),
    Row("sync_ref_model_peft", "trainer", ("training.beta=0.1", "training.sync_ref_model=true", *LORA),
        "training.sync_ref_model", says="while using a PEFT model"),
    Row("lora_lm_head", "trainer", (*LORA, "model.lora.target_modules=[q_proj,lm_head]"),
        "model.lora.target_modules", says="PEFT adapter to `lm_head`"),
    Row("liger_fused_linear_cross_entropy", "trainer",
        ("training.use_liger_kernel=true", "training.liger_kernel_config={fused_linear_cross_entropy: true}"),
        "training.liger_kernel_config", says="fused_linear_cross_entropy"),
    Row("router_aux_loss_coef", "trainer", ("training.router_aux_loss_coef=0.01",), "training.router_aux_loss_coef",
        says="not a Mixture-of-Experts model"),
    Row("vespo_vllm_is_mode", "trainer", (*VLLM, "training.loss_type=vespo"), "training.vllm_importance_sampling_mode",
        says="VESPO loss requires"),
    Row("schema: reward_weights belongs to rewards[].weight", "trainer", ("training.reward_weights=[1.0,2.0]",),
        "training.reward_weights", says="Number of reward weights", config_extra={"reward_weights": [1.0, 2.0]}),
    # TRL 1.16 only logs these (logger.warning) and trains on: validate warns, exit 0
    Row("luspo_sequence_level", "trainer", ("training.loss_type=luspo",), "training.importance_sampling_level",
        "warn", says="When using `'luspo'` loss"),
    Row("vespo_token_level", "trainer", ("training.loss_type=vespo", "training.importance_sampling_level=sequence"),
        "training.importance_sampling_level", "warn", says="VESPO computes sequence-level"),
    Row("sequence_level_summing_loss", "trainer", ("training.importance_sampling_level=sequence",),
        "training.importance_sampling_level", "warn", says="loss sums per-token"),
]
IDS = [r.rule.split(":")[0] + ":" + "|".join(r.overrides)[:40] for r in TABLE]


def test_every_rule_has_a_row() -> None:
    assert {r.name for r in RULES} <= {row.rule for row in TABLE}
    assert all(row.says for row in TABLE)


def test_the_four_overrides_from_the_issue_are_caught() -> None:
    for overrides, key, code in [(("training.log_completions_hub_repo=org/name",), "log_completions_hub_repo", 2),
                                 (("training.auto_find_batch_size=true",), "auto_find_batch_size", 2),
                                 (("training.sync_ref_model=true",), "sync_ref_model", 2),
                                 (("training.beta=0.04", "training.sync_ref_model=true", *LORA), "sync_ref_model", 2),
                                 # TRL 1.16 only warns for luspo with token-level importance sampling
                                 (("training.loss_type=luspo",), "importance_sampling_level", 0)]:
        result = run_cli("validate", DEMO, *overrides)
        assert result.exit_code == code and key in result.output, (overrides, result)


@pytest.mark.parametrize("row", TABLE, ids=IDS)
def test_validate_names_the_key(row: Row) -> None:
    result = run_cli("validate", DEMO, *row.overrides)
    if row.expect == "raise":
        assert result.exit_code == 2, result
        assert row.key in result.output and "Traceback" not in result.output
    else:
        assert result.exit_code == 0, result
        assert "warning" in result.output and row.key in result.output.replace("\n", "")


def test_validate_catches_them_without_importing_torch() -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "grpo_cli", "validate", str(DEMO),
                           "training.sync_ref_model=true"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "sync_ref_model" in proc.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import")}
    assert "grpo_cli.validation.trl_rules" in imported
    assert not {"torch", "transformers", "trl"} & imported


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _build_with_trl(row: Row, tmp_path: Path) -> list[str]:
    """Build GRPOConfig (and GRPOTrainer) as `grpo train` does; return TRL's warnings. Raises what TRL raises."""
    from grpo_cli.recipe import load_recipe

    schema_rows = [o for o in row.overrides if o.split("=")[0].removeprefix("training.") in row.config_extra]
    recipe = load_recipe(DEMO, [o for o in row.overrides if o not in schema_rows])
    from trl import GRPOConfig, GRPOTrainer

    from grpo_cli.data import prepare_data
    from grpo_cli.models import load_model
    from grpo_cli.rewards import build_reward_funcs
    from grpo_cli.training.config import grpo_config_kwargs

    config = GRPOConfig(**{**grpo_config_kwargs(recipe, tmp_path, "float32", "cpu"), **row.config_extra})
    if row.site == "config":
        return []
    loaded = load_model(recipe)
    data = prepare_data(recipe, loaded.tokenizer)
    collect = _Collect()
    logging.getLogger("trl.trainer.grpo_trainer").addHandler(collect)
    try:
        GRPOTrainer(model=loaded.model, reward_funcs=build_reward_funcs(recipe), args=config, train_dataset=data.train,
                    processing_class=loaded.tokenizer, peft_config=loaded.peft_config)
    finally:
        logging.getLogger("trl.trainer.grpo_trainer").removeHandler(collect)
    return collect.messages


@pytest.mark.slow
@pytest.mark.parametrize("row", TABLE, ids=IDS)
def test_trl_really_rejects_it(row: Row, tmp_path: Path) -> None:
    if row.expect == "raise":
        with pytest.raises((ValueError, NotImplementedError), match=re.escape(row.says)):
            _build_with_trl(row, tmp_path)
    else:
        messages = _build_with_trl(row, tmp_path)
        assert any(row.says in m for m in messages), messages
