"""A launch profile is one row of `grpo_cli.recipe.profiles` (plus its name in `Profile` and its accelerate file):
the schema, the launcher, the checks and the memory plan all ask that row, so each row must be enough.

docs/architecture.md ("where things go") names those files; these tests hold every shipped row to it.
"""

from __future__ import annotations

from typing import get_args

import pytest

from grpo_cli.launching.relaunch import accelerate_command, profile_config_path
from grpo_cli.planning.memory import memory_plan
from grpo_cli.recipe.loader import load_recipe
from grpo_cli.recipe.profiles import PROFILES, Profile, multi_process_names
from tests.conftest import MINIMAL
from tests.planning.test_memory import QWEN05

# accelerate's distributed_type for what a row says it runs.
KIND = {(False, False, False): "NO", (True, False, False): "MULTI_GPU", (True, True, False): "DEEPSPEED",
        (True, False, True): "FSDP"}


def test_the_schema_accepts_exactly_the_rows_of_the_table() -> None:
    assert set(get_args(Profile)) == set(PROFILES)
    assert multi_process_names() == ["ddp", "zero2", "zero3", "fsdp"]


@pytest.mark.parametrize("name", [n for n, p in PROFILES.items() if p.accelerate_config])
def test_each_rows_accelerate_file_runs_what_the_row_says(name: str) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    row = PROFILES[name]
    cfg = load_config_from_file(str(profile_config_path(name)))
    fsdp = row.shards_weights and not row.deepspeed
    assert cfg.distributed_type.value == KIND[(row.multi_process, row.deepspeed, fsdp)]
    assert profile_config_path(name).name == row.accelerate_config


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_row_drives_the_launcher_and_the_memory_plan(name: str, write_recipe, minimal_dir) -> None:
    row = PROFILES[name]
    world = 4 if row.multi_process else 1
    recipe = load_recipe(write_recipe(MINIMAL), [f"launch.profile={name}", f"launch.num_processes={world}",
                                                 "model.dtype=bfloat16"])
    assert recipe.launch.spec is row
    if row.multi_process:
        cmd = accelerate_command(recipe, "recipe.yaml", [], [], gpus=world)
        assert cmd[cmd.index("--config_file") + 1] == str(profile_config_path(name))
    plan, why = memory_plan(recipe, config=QWEN05, gpu_memory_gb=None, world_size=world)
    assert plan is not None, why
    weights, grads = plan.item("weights"), plan.item("gradients")
    assert weights is not None and grads is not None
    assert weights.bytes == plan.params * 2 / (world if row.shards_weights else 1)
    assert grads.bytes == plan.params * 2 / (world if row.shards_state else 1)
    assert (plan.item("CUDA context & workspace") is None) == row.cpu_only
