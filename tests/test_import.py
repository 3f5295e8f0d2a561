"""`grpo import`: eighteen public GRPO configs (tests/fixtures/imports, sources and licences in SOURCES.md) convert
into recipes that validate, or say exactly why not; what is left out is listed, never dropped silently."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_cli.recipe.loader import load_recipe
from tests.conftest import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures" / "imports"
OPEN_R1_CODE = ["--profile", "zero2", "--num-processes", "7"]  # open-r1's README launch for its code recipes
BASE = "model.name_or_path=Qwen/Qwen2.5-1.5B-Instruct"  # the base_model of the page the fragment belongs to

# (kind, fixture, extra args, validates, keys left out (substrings), {recipe key: expected value})
CASES = [
    ("open-r1", "open-r1/Qwen2.5-1.5B-Instruct__config_demo.yaml", [], True, [],
     {"rewards": [{"name": "accuracy"}, {"name": "format"}, {"name": "tag_count"}],
      "data.max_prompt_tokens": 512, "launch.vllm.mode": "server", "training.warmup_steps": 0.1}),
    ("open-r1", "open-r1/Qwen2.5-1.5B-Instruct__config_demo_code.yaml", OPEN_R1_CODE, True, [],
     {"data.columns": {"tests": "verification_info.test_cases", "language": "verification_info.language"},
      "training.lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "rewards": [{"name": "code"},
                                                                         {"name": "format", "weight": 0.1}]}),
    ("open-r1", "open-r1/Qwen2.5-1.5B-Instruct__config_demo_code_ioi.yaml", OPEN_R1_CODE, True,
     ["ioi_code", "code_eval_test_batch_size"],
     {"rewards": [{"name": "code_format", "params": {"language": "cpp"}, "weight": 0.1},
                  {"name": "format", "weight": 0.1}]}),
    ("open-r1", "open-r1/Qwen2.5-Coder-7B-Instruct__config_codeforces.yaml", OPEN_R1_CODE, True,
     ["cf_code", "vllm_device", "hub_model_revision", "callbacks", "benchmarks", "code_eval_test_batch_size",
      "code_eval_scoring_mode"],
     {"output.wandb": {"entity": "huggingface", "project": "open-r1"}, "training.scale_rewards": False,
      "training.mask_truncated_completions": True, "launch.vllm.gpu_memory_utilization": 0.7}),
    ("open-r1", "open-r1/DeepSeek-R1-Distill-Qwen-1.5B__config_demo.yaml", [], True, [],
     {"training.use_liger_kernel": True, "training.lr_scheduler_type": "cosine_with_min_lr"}),
    ("open-r1", "open-r1/Qwen2.5-Math-7B__config_simple_rl.yaml", OPEN_R1_CODE, True, [],
     {"data.eval_split": "test", "training.eval_strategy": "steps",
      "data.dataset": "DigitalLearningGmbH/MATH-lighteval", "data.config": "default"}),
    ("open-r1", "open-r1/OpenR1-Zero-7B-Math__config_v00.00.yaml", [], True,
     ["hub_model_revision", "callbacks", "benchmarks"], {"data.config": "all"}),
    ("trl", "trl/clis_grpo_config.yaml", [], True, [],
     {"rewards": [{"function": "trl.rewards:accuracy_reward"}], "model.name_or_path": "Qwen/Qwen2.5-0.5B"}),
    ("trl", "trl/clis_grpo_config_num_processes.yaml", [], True, [],
     {"launch.profile": "ddp", "launch.num_processes": 4}),
    ("trl", "trl/train_grpo.py", [], True, [],
     {"data.dataset": "trl-lib/DeepMath-103K", "model.name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
      "rewards": [{"function": "trl.rewards:accuracy_reward"}]}),
    ("trl", "trl/train_grpo_72b.py", ["--profile", "zero3", "--num-processes", "32"], True,
     ["GRPOConfig(vllm_server_host=...)"], {"launch.vllm.mode": "server", "training.per_device_train_batch_size": 4}),
    # TRL's environment example: the class it passes as environment_factory, and its 1000 copies of one prompt as
    # environment-only rows; max_steps is given (the script counts epochs over its copies of that prompt).
    ("trl", "trl/grpo_2048.py", ["training.max_steps=3000"], True, [],
     {"training.chat_template_kwargs": {"enable_thinking": False}, "output.report_to": ["trackio"],
      "model.lora": {"r": 8, "alpha": 8},  # peft_config=LoraConfig(): peft's defaults
      "environment": f"{FIXTURES / 'trl' / 'grpo_2048.py'}:Game2048Env", "data.from_environment": True,
      "data.prompt.template": "Play 2048 on a 4x4 board. Use the tool `move` with one of: up, down, left, right. "
                              "Maximize the score."}),
    ("axolotl", "axolotl/grpo_qmd/config.yaml", [], True,
     ["use_data_producer", "vllm_lora_sync", "skip_prepare_dataset", "sequence_len"],
     {"data.prompt.column": "question", "data.answer": {"column": "answer", "extract": "gsm8k"},  # its transform
      "model.lora": {"r": 32, "alpha": 64, "target_modules": "all-linear"}, "model.pad_token": "<|endoftext|>",
      "training.per_device_train_batch_size": 2, "training.optim": "adamw_torch_fused",
      "training.lr_scheduler_type": "cosine", "launch.vllm.max_model_length": 2048}),
    ("axolotl", "axolotl/rlhf_qmd_gsm8k/config.yaml", [BASE], True, [],
     {"training.beta": 0.001, "data.config": "main", "data.prompt": {"column": "question", "chat": True},
      "data.answer": {"column": "answer", "extract": "gsm8k"}}),
    ("axolotl", "axolotl/rlhf_qmd_rollout/config.yaml", [BASE], True, ["rollout_func", "datasets[0].type"], {}),
    ("axolotl", "axolotl/rlhf_qmd_async_lora/config.yaml", [], True,
     ["use_data_producer", "replay_buffer_size", "skip_zero_advantage_batches"],
     {"training.vllm_importance_sampling_correction": True, "training.importance_sampling_level": "token"}),
    ("axolotl", "axolotl/rlhf_qmd_nemo_gym_lora_server/config.yaml", [], False, ["plugins", "nemo_gym_enabled"], {}),
    ("axolotl", "axolotl/nemo_gym_sudoku/config.yaml", [], False, ["plugins", "nemo_gym_datasets", "datasets"],
     {"training.optim": "adamw_8bit", "training.gradient_accumulation_steps": 64}),
]


def _dig(recipe: dict, key: str) -> object:
    node: object = recipe
    for part in key.split("."):
        assert isinstance(node, dict) and part in node, f"{key} missing from {recipe}"
        node = node[part]
    return node


@pytest.mark.parametrize(("kind", "fixture", "extra", "validates", "left_out", "expected"), CASES,
                         ids=[c[1] for c in CASES])
def test_public_configs_convert_and_validate(tmp_path: Path, kind: str, fixture: str, extra: list[str],
                                            validates: bool, left_out: list[str], expected: dict) -> None:
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", kind, FIXTURES / fixture, *extra, "-o", out)
    text = " ".join(result.output.split())
    dropped = [line.split("not carried over: ", 1)[1].split(" = ", 1)[0] for line in result.output.splitlines()
               if "not carried over: " in line]
    for key in left_out:
        assert any(key in d for d in dropped), (key, dropped)
    if not left_out:
        assert "fully" in text, result.output
    if not validates:  # still written, marked, with the command that finishes it
        assert result.exit_code == 2 and out.read_text(encoding="utf-8").startswith("# NOT VALID"), result.output
        assert "does not validate" in text
        assert "finish it with: grpo import" in text or "finish it by hand: fix each problem above" in text
        assert run_cli("validate", out).exit_code == 2
        recipe = yaml.safe_load(out.read_text(encoding="utf-8"))
    else:
        assert result.exit_code == 0, result.output
        recipe = yaml.safe_load(out.read_text(encoding="utf-8"))
        load_recipe(out)  # and `grpo validate` agrees
        assert run_cli("validate", out).exit_code == 0
        header = out.read_text(encoding="utf-8").split("\nmodel:", 1)[0]
        for key in left_out:
            assert key.split("(")[0].split("[")[0] in header  # the file says what it lacks
    for key, value in expected.items():
        found = _dig(recipe, key)
        if key == "environment":  # written relative to the recipe, which is where grpo resolves it
            found = f"{(out.parent / str(found).rpartition(':')[0]).resolve()}:{str(found).rpartition(':')[2]}"
        assert found == value, key


def test_at_least_twelve_public_configs_convert_to_valid_recipes() -> None:
    assert sum(1 for case in CASES if case[3]) >= 12
    assert (FIXTURES / "SOURCES.md").read_text(encoding="utf-8").count("Apache-2.0") >= len(CASES)


def test_open_r1_chat_template_and_system_prompt_survive(tmp_path: Path) -> None:
    source = yaml.safe_load((FIXTURES / "open-r1/DeepSeek-R1-Distill-Qwen-1.5B__config_demo.yaml").read_text())
    out = tmp_path / "r.yaml"
    assert run_cli("import", "open-r1", FIXTURES / "open-r1/DeepSeek-R1-Distill-Qwen-1.5B__config_demo.yaml",
                   "-o", out).exit_code == 0
    recipe = load_recipe(out)
    assert recipe.model.chat_template == source["chat_template"]
    assert recipe.data.prompt.system_prompt == source["system_prompt"]
    assert [e.name for e in recipe.rewards] == source["reward_funcs"]


def test_bad_import_input_is_one_paragraph(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_name_or_path: [unclosed\n", encoding="utf-8")
    result = run_cli("import", "open-r1", bad)
    assert result.exit_code == 2 and "not valid YAML" in result.output and "Traceback" not in result.output
    result = run_cli("import", "verl", bad)
    assert result.exit_code == 2 and "open-r1, trl, axolotl" in result.output
