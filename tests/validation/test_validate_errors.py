"""Malformed recipes and command lines: each must exit 2, name the key or file, and show no traceback."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import MINIMAL, RECIPES, ROOT, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def _recipe(minimal_dir: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = minimal_dir / name
    path.write_text(text, encoding="utf-8")
    return path


CASES: list[tuple[str, str, list[str], tuple[str, ...]]] = [
    # id, recipe text, extra CLI args, expected fragments in the message
    ("unknown-top-level-key", MINIMAL + "optimizer: adamw\n", [], ("optimizer", "unknown key")),
    ("typo-in-model", MINIMAL.replace("name_or_path: Qwen", "dtyp: auto\n  name_or_path: Qwen"), [],
     ("model.dtyp", "Did you mean `dtype`")),
    ("wrong-type-lora-r", MINIMAL.replace("  name_or_path: Qwen/Qwen2.5-0.5B-Instruct",
                                          "  name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n  lora: {r: abc}"), [],
     ("model.lora.r", "'abc'")),
    ("missing-name-or-path", MINIMAL.replace("  name_or_path: Qwen/Qwen2.5-0.5B-Instruct", "  revision: main"), [],
     ("model.name_or_path", "required")),
    ("missing-data-section", "model: {name_or_path: x/y}\nrewards: [{name: accuracy}]\n", [], ("data", "required")),
    ("bad-enum-dtype", MINIMAL.replace("  name_or_path: Qwen/Qwen2.5-0.5B-Instruct",
                                       "  name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n  dtype: fp8"), [],
     ("model.dtype", "fp8")),
    ("negative-lora-dropout", MINIMAL.replace("  name_or_path: Qwen/Qwen2.5-0.5B-Instruct",
                                              "  name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n  lora: {dropout: -0.1}"),
     [], ("model.lora.dropout", "-0.1")),
    ("training-typo", MINIMAL + "  learnig_rate: 1.0e-5\n", [], ("training.learnig_rate", "learning_rate")),
    ("kl_coef-migration", MINIMAL + "  kl_coef: 0.04\n", [], ("training.kl_coef", "training.beta")),
    ("max_new_tokens-migration", MINIMAL + "  max_new_tokens: 256\n", [],
     ("training.max_new_tokens", "max_completion_length")),
    ("max_prompt_length-migration", MINIMAL + "  max_prompt_length: 256\n", [],
     ("training.max_prompt_length", "data.max_prompt_tokens")),
    ("reward_function-migration", MINIMAL + "reward_function: accuracy\n", [], ("reward_function", "`rewards`")),
    ("training-wrong-type", MINIMAL.replace("num_generations: 4", "num_generations: eight"), [],
     ("training.num_generations", "integer")),
    ("bad-loss-type", MINIMAL + "  loss_type: ppo\n", [], ("training.loss_type", "'ppo'", "dapo")),
    ("bad-scale-rewards", MINIMAL + "  scale_rewards: sometimes\n", [], ("training.scale_rewards", "batch")),
    ("negative-temperature", MINIMAL + "  temperature: -0.5\n", [], ("training.temperature", "> 0")),
    ("negative-learning-rate", MINIMAL + "  learning_rate: -1.0e-5\n", [], ("training.learning_rate",)),
    ("owned-elsewhere", MINIMAL + "  output_dir: /tmp/x\n", [], ("training.output_dir", "output.dir")),
    ("indivisible-generation-batch", MINIMAL.replace("num_generations: 4", "num_generations: 3"), [],
     ("training.num_generations", "not divisible", "per_device_train_batch_size: 6")),
    ("rows-for-no-step", MINIMAL.replace("per_device_train_batch_size: 4", "per_device_train_batch_size: 52"), [],
     ("data:", "12 training row(s) give 0 optimizer steps", "needs 13 prompts", "data.max_samples")),
    ("one-generation", MINIMAL.replace("num_generations: 4", "num_generations: 1"), [],
     ("training.num_generations",)),
    ("world-size-breaks-division", MINIMAL.replace("num_generations: 4", "num_generations: 8")
     + "launch: {profile: ddp, num_processes: 7}\n", [], ("training.num_generations", "7 processes")),
    ("eval-batch-indivisible", MINIMAL.replace("  files: data.jsonl", "  files: data.jsonl\n  eval_holdout: 0.25")
     + "  eval_strategy: steps\n  per_device_eval_batch_size: 3\n", [], ("training.per_device_eval_batch_size",)),
    ("both-gen-batch-and-steps", MINIMAL + "  generation_batch_size: 16\n  steps_per_generation: 2\n", [],
     ("training.generation_batch_size", "steps_per_generation")),
    ("bad-scheduler", MINIMAL + "  lr_scheduler_type: cosin\n", [], ("training.lr_scheduler_type", "'cosine'")),
    ("bad-optimizer", MINIMAL + "  optim: adamw\n", [], ("training.optim", "adamw_torch")),
    ("grpo-field-at-top-level", MINIMAL + "beta: 0.1\n", [], ("beta", "training.beta")),
    ("empty-file-list", MINIMAL.replace("files: data.jsonl", "files: []"), [], ("data", "at least one")),
    ("missing-data-file", MINIMAL.replace("files: data.jsonl", "files: nope.jsonl"), [],
     ("data.files", "nope.jsonl")),
    ("unsupported-data-suffix", MINIMAL.replace("files: data.jsonl", "files: data.txt"), [], ("data.files", ".jsonl")),
    ("template-missing-column", MINIMAL.replace("prompt: {column: question}", "prompt: {template: 'Q: {problem}'}"),
     [], ("data.prompt.template", "problem")),
    ("unknown-builtin-reward", MINIMAL.replace("name: accuracy", "name: accurracy"), [],
     ("rewards[0].name", "Did you mean `accuracy`")),
    ("builtin-bad-param", MINIMAL.replace("- name: accuracy", "- name: cosine\n    params: {max_length: 10}"), [],
     ("rewards[0].params.max_length", "max_len")),
    ("reward-file-missing", MINIMAL.replace("- name: accuracy", "- function: missing.py:score"), [],
     ("rewards[0].function", "missing.py")),
    ("reward-module-missing", MINIMAL.replace("- name: accuracy", "- function: no_such_pkg.rewards:score"), [],
     ("rewards[0].function", "no_such_pkg")),
    ("bad-function-reference", MINIMAL.replace("- name: accuracy", "- function: 'rewards.py'"), [],
     ("rewards[0]", "package.module:func")),
    ("duplicate-reward-names", MINIMAL.replace("- name: accuracy", "- name: accuracy\n  - name: accuracy"), [],
     ("rewards", "accuracy")),
    ("quantization-without-lora", MINIMAL.replace("  name_or_path: Qwen/Qwen2.5-0.5B-Instruct",
                                                  "  name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n  quantization: 4bit"),
     [], ("model", "lora")),
    ("bad-override-syntax", MINIMAL, ["training.beta"], ("command line", "training.beta")),
    ("override-unknown-key", MINIMAL, ["training.kl_coef=0.1"], ("training.kl_coef", "beta")),
    ("yaml-syntax-error", "model:\n  name_or_path: [unclosed\ndata: {}\n", [], ("recipe.yaml:", "YAML syntax error")),
    ("empty-file", "\n\n", [], ("recipe.yaml", "empty")),
    ("top-level-list", "- a\n- b\n", [], ("recipe.yaml", "mapping")),
    ("missing-extends", "extends: base.yaml\n" + MINIMAL, [], ("base.yaml",)),
    ("missing-env-var", MINIMAL.replace("Qwen/Qwen2.5-0.5B-Instruct", "${oc.env:GRPO_TEST_UNSET_VAR}"), [],
     ("GRPO_TEST_UNSET_VAR",)),
    ("unknown-suite", MINIMAL + "eval: {suite: gsm9k}\n", [], ("eval: suite 'gsm9k'", "'gsm8k'")),
    ("task-metric-not-a-reward", MINIMAL.replace("  files: data.jsonl", "  files: data.jsonl\n  eval_holdout: 0.25")
     + "eval: {every_steps: 10, metric: format}\n", [], ("eval.metric", "'format'", "one of: accuracy")),
    ("task-metric-without-eval-split", MINIMAL + "eval: {every_steps: 10}\n", [],
     ("eval.every_steps", "eval split", "eval.suite")),
    ("suite-metric-not-accuracy", MINIMAL + "eval: {every_steps: 10, suite: svamp, metric: reward}\n", [],
     ("eval.metric", "accuracy")),
]


@pytest.mark.parametrize("text,extra,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_recipe(minimal_dir: Path, text: str, extra: list[str], needles: tuple[str, ...]) -> None:
    path = _recipe(minimal_dir, text)
    assert_paragraph(run_cli("validate", path, *extra), *needles)


def test_missing_recipe_file(tmp_path: Path) -> None:
    assert_paragraph(run_cli("validate", tmp_path / "nope.yaml"), "nope.yaml", "not found")


def test_circular_extends(minimal_dir: Path) -> None:
    _recipe(minimal_dir, "extends: b.yaml\n" + MINIMAL, "a.yaml")
    _recipe(minimal_dir, "extends: a.yaml\n", "b.yaml")
    assert_paragraph(run_cli("validate", minimal_dir / "a.yaml"), "circular", "a.yaml -> b.yaml -> a.yaml")


def test_reward_function_not_in_file(minimal_dir: Path) -> None:
    (minimal_dir / "my_rewards.py").write_text("def score_len(completions, **kwargs):\n    return [0.0]\n")
    path = _recipe(minimal_dir, MINIMAL.replace("- name: accuracy", "- function: my_rewards.py:score_lenght"))
    assert_paragraph(run_cli("validate", path), "rewards[0].function", "score_lenght", "score_len")


def test_reward_without_kwargs(minimal_dir: Path) -> None:
    (minimal_dir / "my_rewards.py").write_text("def strict(completions, answer):\n    return [0.0]\n")
    path = _recipe(minimal_dir, MINIMAL.replace("- name: accuracy", "- function: my_rewards.py:strict"))
    assert_paragraph(run_cli("validate", path), "rewards[0].function", "**kwargs")


def test_reward_needs_column_the_data_lacks(minimal_dir: Path) -> None:
    (minimal_dir / "my_rewards.py").write_text(
        "def uses_solution(completions, solution, **kwargs):\n    return [0.0 for _ in completions]\n")
    path = _recipe(minimal_dir, MINIMAL.replace("- name: accuracy", "- function: my_rewards.py:uses_solution"))
    assert_paragraph(run_cli("validate", path), "rewards[0]", "`solution`", "data.keep_columns")


def test_builtin_reward_needs_column_the_data_lacks(minimal_dir: Path) -> None:
    path = _recipe(minimal_dir, MINIMAL)
    assert_paragraph(run_cli("validate", path, "data.keep_columns=[question]"), "rewards[0]", "accuracy", "`answer`")


def test_reward_file_syntax_error(minimal_dir: Path) -> None:
    (minimal_dir / "broken.py").write_text("def f(:\n")
    path = _recipe(minimal_dir, MINIMAL.replace("- name: accuracy", "- function: broken.py:f"))
    assert_paragraph(run_cli("validate", path), "rewards[0].function", "syntax error")


def test_debug_shows_traceback(minimal_dir: Path) -> None:
    path = _recipe(minimal_dir, MINIMAL + "  kl_coef: 0.1\n")
    from grpo_cli.errors import GrpoError

    with pytest.raises(GrpoError):
        run_cli("--debug", "validate", path)


def test_chat_prompts_with_a_local_model_lacking_a_chat_template(minimal_dir: Path) -> None:
    model = minimal_dir / "base-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    (model / "tokenizer_config.json").write_text('{"eos_token": "<eos>"}')
    path = _recipe(minimal_dir, MINIMAL.replace("Qwen/Qwen2.5-0.5B-Instruct", "./base-model")
                   .replace("prompt: {column: question}", "prompt: {column: question, chat: true}"))
    assert_paragraph(run_cli("validate", path), "data.prompt.chat", "no chat template")


def test_prompt_and_completion_longer_than_the_model_positions(tmp_path: Path) -> None:
    demo = ROOT / "recipes" / "demo.yaml"  # its bundled model has 128 positions (max_position_embeddings)
    assert_paragraph(run_cli("validate", demo, "training.max_completion_length=100000"),
                     "training.max_completion_length 100000 leaves no room for a prompt in the model's 128 positions",
                     "tiny-arith/config.json", "below 128")
    assert_paragraph(run_cli("validate", demo, "training.max_completion_length=100", "data.max_prompt_tokens=64"),
                     "data.max_prompt_tokens 64 + training.max_completion_length 100 = 164 tokens", "128 positions",
                     "<= 128")
    assert run_cli("validate", demo, "training.max_completion_length=64", "data.max_prompt_tokens=64").exit_code == 0
    assert_paragraph(run_cli("validate", demo, "eval.max_new_tokens=100000"),  # held-out sampling too
                     "eval.max_new_tokens 100000 leaves no room for a prompt in the model's 128 positions")
    for key in ("data.max_prompt_tokens", "data.max_samples"):  # not read as 1
        assert_paragraph(run_cli("validate", demo, f"{key}=true"), key, "must be a whole number > 0, got True")
    model = tmp_path / "scaled"  # a config whose rope scaling may reach further: warned, not refused
    shutil.copytree(ROOT / "grpo_cli" / "assets" / "tiny-arith", model)
    config = json.loads((model / "config.json").read_text())
    config["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 4.0}
    (model / "config.json").write_text(json.dumps(config))
    scaled = run_cli("validate", demo, f"model.name_or_path={model}", "training.max_completion_length=200")
    assert scaled.exit_code == 0 and "rope_scaling may extend that" in " ".join(scaled.output.split()), scaled


@pytest.mark.parametrize(("content", "what"), [
    (b"[1, 2]", "is not a model config (a JSON list, not an object"),
    (b'{"hidden_size": ', "is not a model config (JSONDecodeError"),
    (b"\x00\xff\xfe", "is not a model config (UnicodeDecodeError"),
    (None, "is not a regular file (a device, a named pipe"),  # a named pipe: validate hung reading it
])
def test_a_damaged_model_config_is_one_paragraph(tmp_path: Path, content: bytes | None, what: str) -> None:
    model = tmp_path / "model"
    shutil.copytree(ROOT / "grpo_cli" / "assets" / "tiny-arith", model)
    (model / "config.json").unlink()
    if content is None:
        os.mkfifo(model / "config.json")
    else:
        (model / "config.json").write_bytes(content)
    assert_paragraph(run_cli("validate", ROOT / "recipes" / "demo.yaml", f"model.name_or_path={model}"),
                     "model.name_or_path", str(model / "config.json"), what, "Restore the model's config.json")


@pytest.mark.parametrize("args, needles", [
    (["--threads", "99999999999"], ["launch.threads", "less than or equal to 4096"]),
    (["--num-processes", "99999999999"], ["launch.num_processes", "65536"]),
    (["training.learning_rate=.inf"], ["training.learning_rate", "not a finite number"]),
    (["training.seed=-1"], ["training.seed", ">= 0"]),
    (["training.seed=4294967296"], ["training.seed", "<= 4294967295"]),
    (["data.seed=-1"], ["data.seed"]),
    (["eval.seed=-1"], ["eval.seed"]),
    (["output.dir=''"], ["output.dir", "is empty"]),
])
def test_values_that_broke_training_are_refused_by_validate(args, needles) -> None:
    assert_paragraph(run_cli("validate", DEMO, *args), *needles)


def test_an_infinite_gradient_norm_still_means_no_clipping() -> None:
    assert run_cli("validate", DEMO, "training.max_grad_norm=.inf").exit_code == 0


def test_bad_builtin_param_value_fails_validate(demo_copy: Path) -> None:
    assert_paragraph(run_cli("validate", demo_copy, "rewards=[{name: accuracy, params: {answer_format: roman}}]"),
                     "rewards[0].params.answer_format", "roman", "first_number")


def test_bad_builtin_param_type_fails_validate(demo_copy: Path) -> None:
    assert_paragraph(run_cli("validate", demo_copy, "rewards=[{name: accuracy, params: {use_math_verify: sometimes}}]"),
                     "rewards[0].params.use_math_verify", "sometimes")
