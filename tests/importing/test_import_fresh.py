"""`grpo import` on issue 51's fresh set: 16 public GRPO sources from repositories neither the importer nor the wild
set used (tests/fixtures/imports/fresh, sources and licences in SOURCES.md), each imported as its README launches it;
open-r1 forks are read with their own code."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, run_cli
from tests.importing.test_import_wild import COMMAND, PLACEHOLDER, REFUSED, VALIDATES, _finishing_command

FRESH = ROOT / "tests" / "fixtures" / "imports" / "fresh"
# Issue 51's fresh set (fresh/SOURCES.md), each imported as its README launches it, with -o: (kind, fixture, outcome)
FRESH_CASES = [
    # the open-r1 forks, imported from their checkouts (each fork's src/open_r1/ beside its recipe)
    ("open-r1", "knowledge-r1/config_kr1.yaml", REFUSED),  # its rewards read what its own trainer builds
    ("open-r1", "rlpvr-open-r1/rlpvr-example.yaml", PLACEHOLDER),  # its `<dataset-path>`, a file (private data)
    ("open-r1", "rlpvr-open-r1/r1-distill-7b-mcqa.yaml", PLACEHOLDER),  # a data file of its machine (private)
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
    assert recipe["data"]["prompt"]["column"] == "prompt"  # its grpo.py reads `example[prompt_column]`: the YAML's
    assert "src/open_r1/rewards.py line 704" in said and "open_r1.grpo_trainer.GRPOTrainer" in said
    said, recipe, out = imported("openr1_Translation/config_demo.yaml", "translation.yaml")
    assert recipe["rewards"] == [{"function": "translation_rewards.py:bleu_reward"}]  # its default, ['bleu']
    copied = (tmp_path / "translation_rewards.py").read_text(encoding="utf-8")
    assert "def bleu_reward(completions, solution, **kwargs):" in copied and "import sentence_bleu" in copied
    assert "create_model_for_translation()" in said and "imports nltk, not installed here" in said
    said, recipe, _ = imported("knowledge-r1/config_kr1.yaml", "kr1.yaml")
    assert "it reads `msg_lists`, which the fork's own trainer KnowledgeGRPOTrainer" in said
    assert "rewards" not in recipe and "finish it by hand" in said  # no placeholder reward to fill in
    assert recipe["data"]["dataset"] == "hzy/kr1_2wiki"  # a hub id: its grpo.py calls load_dataset
    # rlpvr's grpo.py opens dataset_name itself (line 187) and builds each user message from the row's `problem`
    rows = tmp_path / "mcqa.jsonl"  # its `dataset_name: <dataset-path> # jsonl format`, filled in with its columns
    one_step = 24 * 8 * 7 // 7  # per_device_train_batch_size x steps_per_generation x 7 processes / num_generations
    rows.write_text('{"problem": "Which is prime? A) 4 B) 7", "solution": "B"}\n' * one_step, encoding="utf-8")
    fixture = "rlpvr-open-r1/rlpvr-example.yaml"
    said, recipe, out = imported(fixture, "rlpvr.yaml")
    assert recipe["rewards"] == [{"function": "open_r1.rewards:accuracy_reward"}]  # its own, not open-r1's
    assert "opens dataset_name as a local file (src/open_r1/grpo.py line 187), never a hub dataset" in said
    assert "data.files=LOCAL_FILE" in said and "HUB_DATASET_ID" not in said
    assert recipe["data"]["prompt"]["column"] == "problem" and "(src/open_r1/grpo.py lines 182, 203, 212, 224)" in said
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


@pytest.mark.parametrize("damage", ["def broken(:\n", "X = " + " + ".join(["1"] * 3000) + "\n", "fifo"])
def test_a_fork_file_grpo_cannot_read_is_named_as_the_reason(damage: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 51: a fork whose rewards.py grpo cannot read (a syntax error, an expression nested past
    Python's recursion limit, a named pipe) refused its `bleu` as 'a value built when the fork's grpo.py runs', or
    stopped with a RecursionError traceback; now the refusal names the file and why."""
    import os
    import shutil

    fork = tmp_path / "fork"
    shutil.copytree(FRESH / "openr1_Translation", fork)
    rewards = fork / "src" / "open_r1" / "rewards.py"
    if damage == "fifo":
        rewards.unlink()
        os.mkfifo(rewards)
    else:
        rewards.write_text(rewards.read_text(encoding="utf-8") + damage, encoding="utf-8")
    monkeypatch.chdir(fork)
    result = run_cli("import", "open-r1", "config_demo.yaml", *FRESH_LAUNCH["openr1_Translation/config_demo.yaml"],
                     "-o", tmp_path / "r.yaml")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in said, result.output
    why = {"fifo": "is not a regular file", "def broken(:\n": "is not valid Python (line"}.get(
        damage, "nests an expression past Python's recursion limit")
    assert f"`bleu_reward` (src/open_r1/grpo.py line 154), defined where grpo cannot read: src/open_r1/rewards.py " \
           f"{why}" in said
