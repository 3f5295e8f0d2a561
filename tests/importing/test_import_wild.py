"""`grpo import` on 23 public GRPO sources from repositories it was not built on (tests/fixtures/imports/wild,
sources and licences in SOURCES.md): each is imported as a new user would, from its own directory; it validates,
or it is refused with the one command that finishes it (which then validates), or with the reason it cannot."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

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

FRESH = ROOT / "tests" / "fixtures" / "imports" / "fresh"
# Issue 51's fresh set (fresh/SOURCES.md), each imported as its README launches it, with -o: (kind, fixture, outcome)
FRESH_CASES = [
    # the open-r1 forks, imported from their checkouts (each fork's src/open_r1/ beside its recipe)
    ("open-r1", "knowledge-r1/config_kr1.yaml", REFUSED),  # its rewards read what its own trainer builds
    ("open-r1", "rlpvr-open-r1/rlpvr-example.yaml", PLACEHOLDER),  # its `<dataset-path>`; its own `accuracy`
    ("open-r1", "rlpvr-open-r1/r1-distill-7b-mcqa.yaml", PLACEHOLDER),  # a data file of its machine
    ("open-r1", "gopo/config_tldr_regular_skywork-8b_seed42.yaml", VALIDATES),  # its registry's reward model
    ("open-r1", "openr1_Translation/config_demo.yaml", VALIDATES),  # its default `bleu`, copied
    ("open-r1", "Post-Completion-Learning/exp002_config_gsm8k.yaml", COMMAND),  # the hub model its directory is named
    ("trl", "reasoning-vocab/exp_grpo.py", VALIDATES),  # extracted by default (it trains when imported)
    ("trl", "unsloth-notebooks/Qwen3_(4B)-GRPO.py", VALIDATES),  # its tokenizer bound from the recipe
    ("trl", "unsloth-notebooks/Gemma3_(1B)-GRPO.py", VALIDATES),
    ("trl", "unsloth-notebooks/Llama3.1_(8B)-GRPO.py", VALIDATES),
    ("trl", "unsloth-notebooks/Advanced_Llama3_2_(3B)_GRPO_LoRA.py", VALIDATES),
    ("trl", "unsloth-notebooks/Mistral_v0.3_(7B)-GRPO.py", VALIDATES),
    ("trl", "unsloth-notebooks/Phi_4_(14B)-GRPO.py", VALIDATES),
    ("trl", "unsloth-notebooks/DeepSeek_R1_0528_Qwen3_(8B)_GRPO.py", VALIDATES),  # with its loop over the vocabulary
    ("trl", "unsloth-molab/Gemma4_(E2B)_GRPO.py", VALIDATES),  # its constant rows written; its own calls copied
    ("trl", "unsloth-molab/gpt-oss-(20B)-GRPO.py", VALIDATES),
]

FRESH_LAUNCH = {  # the flags each README's `accelerate launch` line implies (fresh/SOURCES.md)
    "knowledge-r1/config_kr1.yaml": ["--profile", "zero3", "--num-processes", "7"],
    "rlpvr-open-r1/rlpvr-example.yaml": ["--profile", "zero2", "--num-processes", "7"],
    "rlpvr-open-r1/r1-distill-7b-mcqa.yaml": ["--profile", "zero2", "--num-processes", "7"],
    "gopo/config_tldr_regular_skywork-8b_seed42.yaml": ["--profile", "zero3", "--num-processes", "4"],
    "openr1_Translation/config_demo.yaml": ["--profile", "zero2", "--num-processes", "7"],
    "Post-Completion-Learning/exp002_config_gsm8k.yaml": ["launch.vllm.mode=colocate", "--profile", "zero3"],
}


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


@pytest.mark.parametrize(("kind", "fixture", "outcome"), FRESH_CASES, ids=[c[1] for c in FRESH_CASES])
def test_fresh_sources_validate_or_name_what_the_user_fills_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, fixture: str, outcome: str) -> None:
    """Issue 51's fresh set, imported as each README launches it. (That every refusal agrees with `grpo validate`
    and every placeholder-free finishing command finishes is test_import.py's test over every fixture.)"""
    monkeypatch.chdir((FRESH / fixture).parent)
    monkeypatch.setenv("HF_USERNAME", "friendshipkim")  # gopo's launcher requires it
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", kind, (FRESH / fixture).name, *FRESH_LAUNCH.get(fixture, []), "-o", out)
    assert "Traceback" not in result.output
    if outcome == VALIDATES:
        assert result.exit_code == 0, result.output
        assert run_cli("validate", out).exit_code == 0
        return
    assert result.exit_code == 2 and run_cli("validate", out).exit_code == 2
    command = _finishing_command(result.output)
    if outcome == REFUSED:
        assert command is None  # "finish it by hand": nothing on the command line changes the verdict
        return
    assert command is not None
    if outcome == PLACEHOLDER:
        assert re.search(r"=\.\.\.|[A-Z]{2,}_[A-Z_]+|FUNCTION", command), command
        return
    second = run_cli(*shlex.split(command)[1:])  # COMMAND: as printed, it finishes the recipe
    assert second.exit_code == 0, second.output
    assert run_cli("validate", out).exit_code == 0


def test_the_fresh_set_does_not_regress() -> None:
    """Issue 51, on 16 sources it was not built on: before it, 1 validated on the first import, 6 with the printed
    command, 2 NOT VALID recipes validated and 2 finishing commands repeated the refused import. Read with their
    forks' code, the open-r1 forks' rewards are carried or refused by name (docs/migration.md has the table)."""
    first = [c for c in FRESH_CASES if c[2] == VALIDATES]
    once = [c for c in FRESH_CASES if c[2] in (VALIDATES, COMMAND)]
    assert len(FRESH_CASES) >= 15 and len(first) / len(FRESH_CASES) >= 0.6, (len(first), len(FRESH_CASES))
    assert len(first) >= 12 and len(once) >= 13, (len(first), len(once))
    sources = (FRESH / "SOURCES.md").read_text(encoding="utf-8")
    assert all(c[1].split("/")[0] in sources and Path(c[1]).name in sources for c in FRESH_CASES)


def test_an_open_r1_forks_rewards_are_read_from_its_own_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: a fork's recipe names its registry's rewards (or none: its grpo.py's default). Read from the fork's
    checkout, a reward model id stays one, the fork's own function is copied exactly, and one that reads what only
    the fork's trainer builds is refused by name; what its grpo.py does beyond the YAML is listed."""
    monkeypatch.setenv("HF_USERNAME", "friendshipkim")

    def imported(fixture: str, name: str) -> tuple[str, dict[str, Any], Path]:
        monkeypatch.chdir((FRESH / fixture).parent)
        out = tmp_path / name
        result = run_cli("import", "open-r1", Path(fixture).name, *FRESH_LAUNCH[fixture], "-o", out)
        return " ".join(result.output.split()), yaml.safe_load(out.read_text(encoding="utf-8")), out

    said, recipe, _ = imported("gopo/config_tldr_regular_skywork-8b_seed42.yaml", "gopo.yaml")
    assert recipe["rewards"] == [{"model": "Skywork/Skywork-Reward-V2-Qwen3-8B"}]  # `skywork-qwen3-8b`
    assert "src/open_r1/rewards.py line 704" in said and "open_r1.grpo_trainer.GRPOTrainer" in said
    said, recipe, out = imported("openr1_Translation/config_demo.yaml", "translation.yaml")
    assert recipe["rewards"] == [{"function": "translation_rewards.py:bleu_reward"}]  # its default, ['bleu']
    copied = (tmp_path / "translation_rewards.py").read_text(encoding="utf-8")
    assert "def bleu_reward(completions, solution, **kwargs):" in copied and "import sentence_bleu" in copied
    assert "create_model_for_translation()" in said and "imports nltk, not installed here" in said
    said, recipe, _ = imported("knowledge-r1/config_kr1.yaml", "kr1.yaml")
    assert "it reads `msg_lists`, which the fork's own trainer KnowledgeGRPOTrainer" in said
    assert "rewards" not in recipe and "finish it by hand" in said  # no placeholder reward to fill in
    rows = tmp_path / "mcqa.jsonl"  # its `dataset_name: <dataset-path> # jsonl format`, filled in
    rows.write_text('{"prompt": "Which is prime? A) 4 B) 7", "solution": "B"}\n', encoding="utf-8")
    fixture = "rlpvr-open-r1/rlpvr-example.yaml"
    said, recipe, out = imported(fixture, "rlpvr.yaml")
    assert recipe["rewards"] == [{"function": "open_r1.rewards:accuracy_reward"}]  # its own, not open-r1's
    assert "'<dataset-path>' is neither a hub dataset id" in said and "data.dataset=HUB_DATASET_ID" in said
    finished = run_cli("import", "open-r1", Path(fixture).name, f"data.files={rows}", *FRESH_LAUNCH[fixture], "-o", out,
                       "--force")
    assert finished.exit_code == 2 and "module 'open_r1.rewards' cannot be found" in finished.output
    monkeypatch.syspath_prepend(str(FRESH / "rlpvr-open-r1" / "src"))  # the fork installed, as its README does
    finished = run_cli("import", "open-r1", Path(fixture).name, f"data.files={rows}", *FRESH_LAUNCH[fixture], "-o", out,
                       "--force")
    assert finished.exit_code == 0 and run_cli("validate", out).exit_code == 0, finished.output


def test_only_open_r1s_own_code_becomes_a_built_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork's `accuracy` is grpo's built-in only when its code is one of open-r1's versions of accuracy_reward;
    changed by one value, it is the fork's own and is copied as it is."""
    package = tmp_path / "src" / "open_r1"
    package.mkdir(parents=True)
    for name in ("grpo.py", "rewards.py", "configs.py"):
        (package / name).write_bytes((FRESH / "gopo" / "src" / "open_r1" / name).read_bytes())
    config = tmp_path / "config.yaml"
    text = (FRESH / "gopo" / "config_tldr_regular_skywork-8b_seed42.yaml").read_text(encoding="utf-8")
    config.write_text(text.replace("- skywork-qwen3-8b", "- accuracy\n- format").replace("- 1.0", "- 1.0\n- 1.0"),
                      encoding="utf-8")
    monkeypatch.setenv("HF_USERNAME", "friendshipkim")
    out = tmp_path / "out" / "recipe.yaml"
    run_cli("import", "open-r1", config, "-o", out)
    assert yaml.safe_load(out.read_text(encoding="utf-8"))["rewards"] == [{"name": "accuracy"}, {"name": "format"}]
    rewards = package / "rewards.py"
    changed = rewards.read_text(encoding="utf-8").replace("boxed_match_priority=0,", "boxed_match_priority=1,", 1)
    rewards.write_text(changed, encoding="utf-8")
    run_cli("import", "open-r1", config, "-o", out, "--force")
    entries = yaml.safe_load(out.read_text(encoding="utf-8"))["rewards"]
    assert entries == [{"function": "recipe_rewards.py:accuracy_reward"}, {"name": "format"}]
    assert "boxed_match_priority=1," in (out.parent / "recipe_rewards.py").read_text(encoding="utf-8")


def test_a_notebooks_own_calls_are_copied_with_its_rewards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unsloth's molab Gemma 4 app: its rewards read `_STDLIB_SET = _stdlib_names()` (a scan of the interpreter's
    stdlib) and `benchmarker = Benchmarker(...)` (a class of another cell): the definitions and the assignments are
    copied in line order, with what they use (`@contextmanager` kept on a helper, the cell's own TimeoutError), and
    the module computes what the cells did. A call that would read the user's files stays a refusal naming it."""
    fixture = "unsloth-molab/Gemma4_(E2B)_GRPO.py"
    monkeypatch.chdir((FRESH / fixture).parent)
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", "trl", Path(fixture).name, "-o", out)
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "`_STDLIB_SET = _stdlib_names()` (line 302); `benchmarker = Benchmarker(trials=3, timeout=10)` (line 804)" \
        in text
    module = (tmp_path / "recipe_rewards.py").read_text(encoding="utf-8")
    assert "@contextmanager\ndef time_limit(seconds):" in module and "class TimeoutError(Exception):" in module
    assert module.index("def _stdlib_names") < module.index("_STDLIB_SET = _stdlib_names()") \
        < module.index("def check_only_stdlib_imports")
    namespace: dict = {}
    exec(module, namespace)
    assert {"os", "ast", "json"} <= namespace["_STDLIB_SET"] and "numpy" not in namespace["_STDLIB_SET"]
    native = "```python\ndef matmul(A, B):\n" \
        "    return [[sum(a * b for a, b in zip(r, c)) for c in zip(*B)] for r in A]\n```"
    numpy = "```python\ndef matmul(A, B):\n    import numpy\n    return numpy.matmul(A, B)\n```"
    assert namespace["no_cheating"]([[{"content": native}], [{"content": numpy}]]) == [1.0, -20.0]
    zeros = "```python\ndef matmul(A, B):\n    return [[0.0] * len(B[0]) for _ in A]\n```"
    right, wrong = namespace["correctness_check"]([[{"content": native}], [{"content": zeros}]])  # random matrices
    assert right >= 2.0 and wrong < 0
    with pytest.raises(namespace["TimeoutError"]), namespace["time_limit"](0.05):
        while True:
            pass

    app = tmp_path / "app.py"
    app.write_text(_APP.replace("ROWS", '[{"prompt": [{"role": "user", "content": f"Say word {i}."}]} for i in '
                                        "range(3)]"), encoding="utf-8")
    result = run_cli("import", "trl", app, "-o", tmp_path / "app.yaml")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in text
    assert "it uses `WORDS`, set by `read_words()` (line 12), whose code is not exact in a copy: " \
           "`open('words.txt')` (line 11) reads or changes files" in text
    pure = app.read_text(encoding="utf-8").replace('set(open("words.txt").read().split())', '{"a", "b"}')
    app.write_text(pure, encoding="utf-8")
    assert "rewards known copied exactly" in " ".join(run_cli("import", "trl", app, "-o", tmp_path / "pure.yaml")
                                                      .output.split())
    app.write_text(pure.replace("    WORDS = read_words()\n", "    WORDS = read_words()\n    WORDS.add('c')\n"),
                   encoding="utf-8")
    text = " ".join(run_cli("import", "trl", app, "-o", tmp_path / "changed.yaml").output.split())
    assert "it uses `WORDS`, set by `read_words()` (line 12), whose code is not exact in a copy: line 13 changes " \
           "it: `WORDS.add('c')`" in text


_APP = '''import marimo

app = marimo.App()


@app.cell
def _():
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    def read_words():
        return set(open("words.txt").read().split())
    WORDS = read_words()
    def known(completions, **kwargs):
        return [1.0 if c[0]["content"] in WORDS else 0.0 for c in completions]
    rows = Dataset.from_list(ROWS)
    trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[known], train_dataset=rows,
                          args=GRPOConfig(output_dir="out"))
    return
'''


def test_rows_built_from_constants_are_written_beside_the_recipe(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The molab apps' `Dataset.from_list([{"prompt": [...], "answer": 0}] * 1000)`, its prompt a string of another
    cell, is evaluated without running anything and written as a JSONL beside the recipe (data.files.train); rows
    that read anything else stay refused; without -o nothing is written and the refusal says -o writes them."""
    fixture = "unsloth-molab/gpt-oss-(20B)-GRPO.py"
    monkeypatch.chdir((FRESH / fixture).parent)
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", "trl", Path(fixture).name, "-o", out)
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and run_cli("validate", out).exit_code == 0, result.output
    assert yaml.safe_load(out.read_text(encoding="utf-8"))["data"]["files"] == {"train": "recipe_rows.jsonl"}
    rows = [json.loads(line) for line in (tmp_path / "recipe_rows.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 1000 and all(row == rows[0] for row in rows)
    assert rows[0]["answer"] == 0 and rows[0]["reasoning_effort"] == "low"
    content = rows[0]["prompt"][0]["content"]
    assert content.startswith("Create a new fast matrix multiplication") and content.endswith("```")  # .strip()
    assert "1000 rows from constants" in text and "recipe_rows.jsonl" in text
    assert "training.chat_template_kwargs: {reasoning_effort: low}" in text  # the column TRL does not template

    alone = tmp_path / "alone"  # no recipe file: nothing written, and the printed command asks for one
    alone.mkdir()
    shutil.copy(FRESH / fixture, alone)
    monkeypatch.chdir(alone)
    printed = run_cli("import", "trl", Path(fixture).name)
    assert printed.exit_code == 2 and "with -o RECIPE.yaml the import writes them" in " ".join(printed.output.split())
    assert sorted(p.name for p in alone.iterdir()) == [Path(fixture).name]
    finished = run_cli(*shlex.split(str(_finishing_command(printed.output)))[1:])  # as printed
    assert finished.exit_code == 0 and (alone / "recipe_rows.jsonl").exists(), finished.output
    monkeypatch.chdir((FRESH / fixture).parent)
    given = run_cli("import", "trl", Path(fixture).name, "data.dataset=openai/gsm8k", "-o", tmp_path / "other.yaml")
    assert not (tmp_path / "other_rows.jsonl").exists() and "not written" in given.output

    app = tmp_path / "app.py"
    app.write_text(_APP.replace("ROWS", '[{"prompt": [{"role": "user", "content": f"Say word {i}."}]} for i in '
                                        "range(3)]"), encoding="utf-8")
    run_cli("import", "trl", app, "-o", tmp_path / "app.yaml")
    written = (tmp_path / "app_rows.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["prompt"][0]["content"] for line in written] == ["Say word 0.", "Say word 1.",
                                                                                "Say word 2."]
    app.write_text(_APP.replace("ROWS", '[{"prompt": open("p.txt").read()}] * 3'), encoding="utf-8")
    result = run_cli("import", "trl", app, "-o", tmp_path / "read.yaml")
    assert "builds its training rows in code" in " ".join(result.output.split())
    assert not (tmp_path / "read_rows.jsonl").exists()
