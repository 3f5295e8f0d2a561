"""`grpo import` on 23 public GRPO sources from repositories it was not built on (tests/fixtures/imports/wild,
sources and licences in SOURCES.md): each is imported as a new user would, from its own directory; it validates,
or it is refused with the one command that finishes it (which then validates), or with the reason it cannot."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_cli

WILD = ROOT / "tests" / "fixtures" / "imports" / "wild"
VALIDATES, COMMAND, REFUSED, PLACEHOLDER = "validates", "command", "refused", "placeholder"
OLMO = "open-r1_olmo/"

# (kind, fixture, extra args, outcome, a phrase of the refusal or the finishing command)
CASES = [
    ("open-r1", "open-r1_olmo/SmolLM2-1.7B-Instruct__grpo_config_v00.04.yaml", [], COMMAND, "--num-processes 5"),
    ("open-r1", "open-r1_olmo/OLMo-2-1124-7B-Instruct__grpo_config_v02.07.yaml", [], COMMAND, "VERSION=..."),
    ("open-r1", "open-r1_olmo/Qwen2.5-7B-Instruct__grpo_config_v01.02.yaml", [], COMMAND, "--num-processes 3"),
    ("open-r1", "open-r1_olmo/c4ai-command-r7b__grpo_config_v00.03.yaml", [], COMMAND, "--num-processes 5"),
    ("open-r1", "open-r1_olmo/OLMo-1B-0724-hf__config_demo.yaml", [], VALIDATES, ""),
    ("open-r1", "dreaming-panda/Qwen2.5-1.5B-Instruct__configL28.yaml", [], VALIDATES, ""),
    ("open-r1", "ranonrkm/Qwen2.5-7B-Instruct__config_demo.yaml", [], VALIDATES, ""),
    ("open-r1", "zhikaili1150/mix_reward_2acc1fmt_config_lr_1e-06.yaml", [], VALIDATES, ""),
    ("open-r1", "kevtimova/Qwen2.5-1.5B-Instruct__config_mot.yaml", [], REFUSED, "MORPH_API_KEY"),
    ("open-r1", "TamerSoliman/config_demo_ANNOTATED.yaml", [], VALIDATES, ""),
    ("trl", "philschmid/grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml", [], COMMAND, "run_r1_grpo.py --config"),
    ("trl", "philschmid/run_r1_grpo.py", ["--config", "grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml"], VALIDATES, ""),
    ("axolotl", "grpo_code/r1_acecode.yaml", [], VALIDATES, ""),
    ("axolotl", "grpo_code_3ac874e/grpo_code_mp_v3.yaml", [], VALIDATES, ""),
    ("axolotl", "axolotl-cookbook/gsm8k.yaml", [], VALIDATES, ""),
    ("trl", "r1-dynamic-penalty/train.py", [], VALIDATES, ""),
    ("trl", "aarentai-Qwen/train_grpo.py", [], VALIDATES, ""),  # its rewards extracted by default (exact copies)
    ("trl", "unsloth/save_merged_grpo_model.py", [], VALIDATES, ""),
    ("trl", "unsloth/gemma3_grpo_model.py", [], VALIDATES, ""),
    ("trl", "unsloth/run_grpo_t4.py", [], REFUSED, "data.dataset=HUB_DATASET_ID"),
    ("trl", "opensloth/minimal_grpo.py", [], VALIDATES, ""),
    ("trl", "open-r1-multimodal/grpo.py", [], REFUSED, "--config LAUNCH.yaml"),
    ("trl", "Oxen-GRPO-With-Cargo-Feedback/train.py", [], REFUSED, "downloads cargo_test_passed_train.parquet from "
     "RemoteRepo('ox/Rust') when it is missing"),  # finished by hand: the file is named, no command repeats
]


def _import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, fixture: str, *extra: str,
            name: str = "recipe.yaml") -> tuple[object, Path]:
    monkeypatch.chdir((WILD / fixture).parent)  # as a user runs it, beside the config and its code
    out = tmp_path / name
    return run_cli("import", kind, (WILD / fixture).name, *extra, "-o", out, "--force"), out  # re-imports replace


def _finishing_command(output: str) -> str | None:
    """The printed command; None when the import says the rest is a hand edit (it never repeats itself)."""
    lines = output.splitlines()
    if "finish it with:" not in lines:
        assert any(line.startswith("finish it by hand: ") for line in lines), output
        return None
    return lines[lines.index("finish it with:") + 1].strip()


@pytest.mark.parametrize(("kind", "fixture", "extra", "outcome", "phrase"), CASES, ids=[c[1] for c in CASES])
def test_wild_sources_validate_or_print_the_command_that_finishes_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, fixture: str, extra: list[str], outcome: str,
        phrase: str) -> None:
    result, out = _import(tmp_path, monkeypatch, kind, fixture, *extra)
    assert "Traceback" not in result.output
    if outcome == VALIDATES:
        assert result.exit_code == 0, result.output
        assert run_cli("validate", out).exit_code == 0
        return
    assert result.exit_code == 2, result.output
    assert out.read_text(encoding="utf-8").startswith("# NOT VALID")  # written, marked, for hand-finishing
    assert run_cli("validate", out).exit_code == 2
    command = _finishing_command(result.output)
    assert phrase in " ".join(result.output.split()), result.output
    if outcome == COMMAND:
        assert command is not None  # the printed command, run as printed (a launcher placeholder given a value)
        words = shlex.split(command)
        if words[0] == "VERSION=...":
            monkeypatch.setenv("VERSION", "v01")
            words = words[1:]
        assert words[:2] == ["grpo", "import"] and "..." not in command.replace("VERSION=...", "")
        second = run_cli(*words[1:])
        assert second.exit_code == 0, second.output
        assert run_cli("validate", out).exit_code == 0


def test_at_least_80_percent_of_the_wild_set_converts_with_at_most_the_printed_command() -> None:
    converting = [c for c in CASES if c[3] in (VALIDATES, COMMAND)]
    assert len(CASES) >= 20 and len(converting) / len(CASES) >= 0.8, (len(converting), len(CASES))
    sources = (WILD / "SOURCES.md").read_text(encoding="utf-8")
    assert all(Path(c[1]).name in sources or c[1].split("/")[0] in sources for c in CASES)


def test_model_id_lora_4bit_and_unsloth_vllm_are_read_from_the_calls_that_build_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "trl", "aarentai-Qwen/train_grpo.py", "--extract-rewards")
    recipe = yaml.safe_load(out.read_text())
    assert recipe["model"]["name_or_path"] == "Qwen/Qwen2-0.5B-Instruct"  # AutoModelForCausalLM.from_pretrained
    assert recipe["data"]["prompt"] == {"column": "prompt", "chat": False}  # TRL hands trl-lib/tldr's text over as is
    result, out = _import(tmp_path, monkeypatch, "trl", "r1-dynamic-penalty/train.py", name="dynamic.yaml")
    recipe = yaml.safe_load(out.read_text())
    assert recipe["model"]["name_or_path"] == "Qwen/Qwen2.5-3B-Instruct"  # the --model_name default
    assert "--model_name (line 154)" in " ".join(result.output.split())  # ... and said so
    assert recipe["model"]["quantization"] == "4bit" and recipe["model"]["lora"]["r"] == 64  # load_in_4bit, r=
    assert recipe["model"]["lora"]["alpha"] == 64 and "gate_proj" in recipe["model"]["lora"]["target_modules"]
    assert recipe["launch"]["vllm"] == {"mode": "colocate", "gpu_memory_utilization": 0.5}  # fast_inference=True
    # the rewards of the branch the --reward_type default picks, star-imported from the package beside the script
    assert [r["function"] for r in recipe["rewards"]][-1] == "dynamic_penalty.train.reward:correctness_reward_func"
    # data from get_gsm8k_questions() in dynamic_penalty/data/gsm8k.py: its load_dataset and dataset.map
    assert recipe["data"]["dataset"] == "openai/gsm8k" and recipe["data"]["answer"]["extract"] == "gsm8k"
    assert "Respond in the following format" in recipe["data"]["prompt"]["system_prompt"]
    assert "eval_split" not in recipe["data"]  # it evaluates on another set (get_gsm8k_questions_eval): listed
    assert "GRPOTrainer(eval_dataset=...)" in result.output and "eval_strategy = 'steps'" in result.output
    result, out = _import(tmp_path, monkeypatch, "trl", "unsloth/save_merged_grpo_model.py", "--extract-rewards",
                          name="merged.yaml")
    assert result.exit_code == 0, result.output  # not "./final_merged_model", which only evaluates
    assert yaml.safe_load(out.read_text())["model"]["name_or_path"] == "meta-llama/Llama-3.2-3B-Instruct"


def test_a_model_known_only_at_run_time_refuses_with_the_override(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "trl", "open-r1-multimodal/grpo.py")
    text = " ".join(result.output.split())
    assert "TrlParser" in text and "--config LAUNCH.yaml" in _finishing_command(result.output)
    assert "Qwen2VLGRPOTrainer" in text and "a GRPOTrainer subclass" in text  # the subclass is the trainer, said
    assert "model: is required" not in text  # the TrlParser line says why, once


def test_unreadable_rewards_never_become_a_placeholder_that_validates(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "trl", "unsloth/gemma3_grpo_model.py", "--no-extract-rewards")
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "defined inside training_run() (line 298)" in text and "check_numbers" in text
    assert "rewards" not in yaml.safe_load(out.read_text())  # no `accuracy` stand-in
    result, out = _import(tmp_path, monkeypatch, "trl", "philschmid/grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml")
    recipe = yaml.safe_load(out.read_text())
    assert result.exit_code == 2 and "rewards" not in recipe
    assert recipe["output"]["push_to_hub"] == "qwen-2.5-3b-r1-countdown"  # no REPLACE/ME: output_dir's name
    assert "grpo import trl run_r1_grpo.py --config grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml" in \
        _finishing_command(result.output)


def test_a_reward_in_a_file_that_trains_when_imported_is_refused_then_extracted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "trl", "opensloth/minimal_grpo.py", "--no-extract-rewards")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "runs its training when imported (line 76" in text
    refusal = run_cli("validate", out)  # the marked recipe fails validate for the same reason
    assert refusal.exit_code == 2 and "runs its training when imported (line 76" in " ".join(refusal.output.split())
    result, out = _import(tmp_path, monkeypatch, "trl", "opensloth/minimal_grpo.py", name="extracted.yaml")
    assert result.exit_code == 0, result.output  # extracted by default, and said so
    assert "copied exactly, with what they use, into extracted_rewards.py" in " ".join(result.output.split())
    module = tmp_path / "extracted_rewards.py"
    assert yaml.safe_load(out.read_text())["rewards"] == [{"function": "extracted_rewards.py:reward_correct"}]
    source = module.read_text()
    assert "import re" in source and "unsloth" not in source and "train()" not in source  # only what it uses
    namespace: dict = {}
    exec(compile(source, str(module), "exec"), namespace)  # importing it trains nothing
    completions = [[{"content": "so 42"}], [{"content": "7"}]]
    assert namespace["reward_correct"]([], completions, ["#### 42", "#### 42"]) == [1.0, -1.0]


def test_nested_rewards_are_extracted_with_their_closure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "trl", "unsloth/gemma3_grpo_model.py", "--extract-rewards")
    assert result.exit_code == 0, result.output
    namespace: dict = {}
    exec((tmp_path / "recipe_rewards.py").read_text(), namespace)
    good = [[{"content": "<reasoning>x</reasoning><answer>12</answer>"}]]
    assert namespace["check_numbers"]([[{"content": "q"}]], good, ["12"]) == [1.5]  # match_numbers, PRINTED_TIMES
    assert namespace["match_format_exactly"](good) == [3.0]


def test_dataset_map_is_carried_as_prompt_and_answer_from_the_set_that_feeds_the_trainer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "trl", "unsloth/gemma3_grpo_model.py", "--extract-rewards")
    data = yaml.safe_load(out.read_text())["data"]
    assert data["dataset"] == "openai/gsm8k" and data["config"] == "main"  # not the SFT warm-up set GAIR/LIMO
    assert data["prompt"]["column"] == "question" and data["prompt"]["chat"] is True
    assert data["prompt"]["system_prompt"].startswith("You are given a problem.")  # its f-string, resolved
    assert "<reasoning> and </reasoning>" in data["prompt"]["system_prompt"]
    assert data["answer"] == {"column": "answer", "extract": "gsm8k"}
    result, out = _import(tmp_path, monkeypatch, "trl", "philschmid/run_r1_grpo.py", "--config",
                          "grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml")
    text = " ".join(result.output.split())
    assert "partly" in text and "dataset.map at line 196" in text  # a transform it cannot carry: named, with its line
    recipe = yaml.safe_load(out.read_text())
    assert recipe["data"]["dataset"] == "Jiayi-Pan/Countdown-Tasks-3to4"  # script_args.dataset_id_or_path of the YAML
    assert recipe["data"]["max_samples"] == 50000 and recipe["data"]["eval_holdout"] == 0.1  # select, split
    assert recipe["model"]["name_or_path"] == "Qwen/Qwen2.5-3B-Instruct"


def test_launcher_placeholders_are_named_and_read_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "open-r1", OLMO + "SmolLM2-1.7B-Instruct__grpo_config_v00.04.yaml")
    text = " ".join(result.output.split())
    assert "envsubst" in text and "refers to the recipe key 'VERSION'" not in text
    assert not re.search(r"tmp\w{8}\.yaml", text)  # no temporary file named
    recipe = yaml.safe_load(out.read_text())
    assert recipe["output"]["dir"] == "data/Neelectric/SmolLM2-1.7B-Instruct_GRPO${oc.env:VERSION}"


def test_batch_arithmetic_uses_the_sources_gpu_count_or_prints_num_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERSION", "v01")
    result, out = _import(tmp_path, monkeypatch, "open-r1", OLMO + "OLMo-2-1124-7B-Instruct__grpo_config_v02.07.yaml")
    assert result.exit_code == 0, result.output  # vllm_device: cuda:6 -> 6 training processes, as it ran
    assert yaml.safe_load(out.read_text())["launch"]["num_processes"] == 6
    result, out = _import(tmp_path, monkeypatch, "open-r1", OLMO + "Qwen2.5-7B-Instruct__grpo_config_v01.02.yaml",
                          name="qwen.yaml")
    assert result.exit_code == 2 and "--num-processes 3" in _finishing_command(result.output)


def test_axolotl_keys_are_carried_not_misreported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "axolotl", "axolotl-cookbook/gsm8k.yaml")
    recipe = yaml.safe_load(out.read_text())
    assert recipe["training"]["tf32"] is True and recipe["model"]["attn_implementation"] == "flash_attention_2"
    assert recipe["launch"]["vllm"]["max_model_length"] == 800  # trl.vllm_max_model_len, TRL's older name
    dropped = [line for line in result.output.splitlines() if "not carried over:" in line]
    assert not any(k in line for line in dropped for k in ("tf32", "flash_attention", "run_name", "vllm_max_model"))
    assert recipe["rewards"][0] == {"function": "gsm8k_grpo.py:correctness_reward_func"} or \
        recipe["rewards"][0]["function"].endswith("gsm8k_grpo.py:correctness_reward_func")


def test_star_reexported_rewards_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "axolotl", "grpo_code_3ac874e/grpo_code_mp_v3.yaml")
    assert result.exit_code == 0, result.output  # grpo_code/__init__.py: from .train.wasm_env_v6 import *
    assert {"function": "grpo_code:multiprocessing_code_execution_reward_func"} in yaml.safe_load(
        out.read_text())["rewards"]


def test_references_are_written_relative_to_the_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "trl", "philschmid/run_r1_grpo.py", "--config",
                          "grpo-qwen-2.5-3b-deepseek-r1-countdown.yaml")
    ref = yaml.safe_load(out.read_text())["rewards"][0]["function"]
    assert not Path(ref).is_absolute() and (out.parent / ref.rpartition(":")[0]).resolve() == \
        (WILD / "philschmid" / "run_r1_grpo.py").resolve()


def test_axolotl_row_transforms_are_carried_where_they_build_a_chat_prompt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, out = _import(tmp_path, monkeypatch, "axolotl", "grpo_code/r1_acecode.yaml")
    data = yaml.safe_load(out.read_text())["data"]  # grpo_code/transforms.py: question + "\n\n" + SYSTEM_PROMPT
    assert data["prompt"]["template"].startswith("{question}\n\n\nRespond in the following format:")
    assert data["prompt"]["chat"] is True and data["columns"] == {"answers": "test_cases"}
    assert not any("not carried over: datasets[0].type" in line for line in result.output.splitlines())
    result, out = _import(tmp_path, monkeypatch, "axolotl", "axolotl-cookbook/gsm8k.yaml", name="cookbook.yaml")
    assert yaml.safe_load(out.read_text())["data"]["prompt"]["template"].endswith("\n\n{text}")
    dropped = [line for line in result.output.splitlines() if "not carried over: datasets[0].type" in line]
    assert dropped and "(answer)" in dropped[0]  # label.replace(",", "") is code: named, not guessed


def test_extract_rewards_never_overwrites_a_different_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "recipe_rewards.py"
    mine.write_text("# my own rewards\n", encoding="utf-8")
    result, out = _import(tmp_path, monkeypatch, "trl", "opensloth/minimal_grpo.py", "--extract-rewards")
    assert result.exit_code == 2 and "exists" in result.output and "Traceback" not in result.output
    assert mine.read_text(encoding="utf-8") == "# my own rewards\n"


def test_a_marimo_app_is_read_cell_by_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Oxen.ai's marimo app: model, data, LoRA and GRPOConfig values live in cells and input widgets, the rewards
    are defs inside the training cell using helpers of other cells; the parquet it downloads is not kept."""
    app = "Oxen-GRPO-With-Cargo-Feedback/train.py"
    result, out = _import(tmp_path, monkeypatch, "trl", app)
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "names no reward" not in text
    result, out = _import(tmp_path, monkeypatch, "trl", app, "--no-extract-rewards")
    text = " ".join(result.output.split())
    assert "defined inside a marimo cell (the cell at line 96, the def at line 177)" in text
    assert "--extract-rewards" in str(_finishing_command(result.output))
    recipe = yaml.safe_load(out.read_text())
    assert recipe["model"]["name_or_path"] == "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # mo.ui.text(value=...) in a cell
    assert recipe["model"]["lora"] == {"r": 16, "alpha": 64, "dropout": 0.05, "target_modules": "all-linear"}
    assert text.count("LoRA from LoraConfig") == 1  # reached through get_peft_model and peft_config=, said once
    data = recipe["data"]
    assert data["files"] == {"train": "cargo_test_passed_train.parquet"}  # create_dataset(train_file_ui.value, ...)
    assert data["prompt"]["column"] == "rust_prompt" and data["prompt"]["chat"] is True
    assert data["prompt"]["system_prompt"].startswith("You are a pragmatic Rust programmer")  # SYSTEM_PROMPT's cell
    assert data["columns"] == {"test_list": "rust_test_list"}
    assert recipe["training"]["num_generations"] == 4 and recipe["training"]["save_steps"] == 100  # widgets
    assert "model_name_ui (line 26), num_generations (line 30)" in text and "a marimo app" in text
    assert "use_peft_checkbox (line 31)" in text  # the LoRA is the branch its initial value takes
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {"task_id": [1], "rust_prompt": ["Add two numbers."], "rust_test_list": [["assert_eq!(add(1, 2), 3);"]]}
    pq.write_table(pa.table(row), tmp_path / "cargo_test_passed_train.parquet")  # what the app downloads
    second = run_cli(*shlex.split(str(_finishing_command(result.output)))[1:])
    assert second.exit_code == 0, second.output
    assert run_cli("validate", out).exit_code == 0
    text = " ".join(second.output.split())
    assert "@experiment.log(...)" in text and "cargo_build_reward_func (line 176)" in text  # left off, listed
    namespace: dict = {}
    exec((tmp_path / "recipe_rewards.py").read_text(), namespace)  # RustTool and helpers of other cells, copied
    assert "RustTool" in namespace and "setup_and_test_rust_project" in namespace
    assert namespace["cargo_toml_file"]().startswith('\n    [package]\n    name = "rust-program"')  # as in the cell
    code = "```rust\nfn add(a: i32, b: i32) -> i32 { a + b }\n#[cfg(test)]\nmod tests {\n    use super::*;\n" \
        "    #[test]\n    fn t() {\n        assert_eq!(add(1, 2), 3);\n    }\n}\n```"
    completions = [[{"content": code}], [{"content": "no code"}]]
    assert namespace["test_block_count_reward_func"]([], completions) == [0.5, 0.0]
    assert namespace["non_empty_reward_func"]([], completions) == [1.0, 0.0]


def test_an_override_answers_the_refusal_that_asked_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Giving what the refusal asks for (here the dataset of rows built in code) finishes the import; the refusal
    and its placeholder stayed before, so the printed command could never validate."""
    result, out = _import(tmp_path, monkeypatch, "trl", "unsloth/run_grpo_t4.py", "data.dataset=openai/gsm8k")
    assert result.exit_code == 0, result.output
    assert "builds its training rows" not in result.output and "HUB_DATASET_ID" not in result.output
    assert yaml.safe_load(out.read_text())["data"]["dataset"] == "openai/gsm8k"
