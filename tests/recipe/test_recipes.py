"""Valid recipes: bundled ones validate, inheritance/env/overrides resolve, the plan is right, docs are fresh."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MINIMAL, RECIPES, ROOT, run_cli

BUNDLED = sorted(p.name for p in RECIPES.glob("*.yaml"))


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_recipes_validate(name: str) -> None:
    result = run_cli("validate", RECIPES / name)
    assert result.exit_code == 0, result
    assert "is valid" in result.output


def test_bundled_recipes_include_the_four_named_in_the_docs() -> None:
    assert {"gsm8k.yaml", "gsm8k-zero3.yaml", "multitask.yaml", "demo.yaml"} <= set(BUNDLED)


def test_plan_reports_tlr_batch_arithmetic(minimal_dir: Path) -> None:
    path = minimal_dir / "r.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    result = run_cli("validate", path, "--json", "training.gradient_accumulation_steps=2")
    assert result.exit_code == 0, result
    plan = json.loads(result.output)["plan"]
    # 4 per device x 1 process x 2 accumulation = 8 completions per generation = 2 prompts x 4.
    assert plan["generation batch"].startswith("8 completions = 2 prompts x 4 generations")
    assert plan["completions per optimizer step"] == 8
    assert plan["train rows"] == 12
    # 12 prompts / 2 per generation = 6 generations; each feeds 2 micro-steps = 1 optimizer step.
    assert plan["optimizer steps per epoch"] == 6


def test_extends_env_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = '{"question": "1+1", "answer": "2"}\n'
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "data.jsonl").write_text(rows * 8)
    (tmp_path / "configs" / "base.yaml").write_text(MINIMAL.replace("files: data.jsonl", "files: data.jsonl"))
    (tmp_path / "configs" / "mid.yaml").write_text("extends: base.yaml\ntraining:\n  beta: 0.02\n")
    (tmp_path / "configs" / "top.yaml").write_text(
        "extends: mid.yaml\nmodel:\n  name_or_path: ${oc.env:GRPO_TEST_MODEL,fallback/model}\n"
        "output:\n  dir: ${oc.env:GRPO_TEST_OUT,outputs/default}\n")
    monkeypatch.setenv("GRPO_TEST_MODEL", "org/from-env")
    result = run_cli("validate", tmp_path / "configs" / "top.yaml", "--print", "training.learning_rate=3e-6")
    assert result.exit_code == 0, result
    out = result.output
    assert "name_or_path: org/from-env" in out  # env var
    assert "dir: outputs/default" in out  # env default
    assert "beta: 0.02" in out  # inherited from mid.yaml
    assert "num_generations: 4" in out  # inherited from base.yaml
    assert "learning_rate: 3.0e-06" in out  # command-line override


def test_a_marked_recipe_is_refused_itself_and_through_extends(tmp_path: Path) -> None:
    """The `not_valid:` mark `grpo import` writes (recipe/marked.py) is read by the loader: the marked recipe, and
    one extending it, are refused in one paragraph with why and the finishing command, even with `${...}` in them;
    without the mark the same recipe validates."""
    (tmp_path / "data.jsonl").write_text('{"question": "1+1", "answer": "2"}\n' * 8, encoding="utf-8")
    mark = ("not_valid:\n  why:\n  - 'rewards: 2 of 4 rewards read a tokenizer built at run time'\n"
            "  finish: grpo import trl train.py -o base.yaml --force\n")
    (tmp_path / "base.yaml").write_text(mark + MINIMAL, encoding="utf-8")
    (tmp_path / "top.yaml").write_text("extends: base.yaml\noutput:\n  dir: ${oc.env:NOPE,out}\n", encoding="utf-8")
    for name in ("base.yaml", "top.yaml"):
        result = run_cli("validate", tmp_path / name)
        text = " ".join(result.output.split())
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "marked not valid" in text and "2 of 4 rewards read a tokenizer" in text
        assert "Finish it with `grpo import trl train.py -o base.yaml --force`" in text
    (tmp_path / "base.yaml").write_text(MINIMAL, encoding="utf-8")  # the user deletes the mark
    assert run_cli("validate", tmp_path / "top.yaml").exit_code == 0


def test_python_api_matches_cli(minimal_dir: Path) -> None:
    from grpo_cli import load_recipe, preflight

    path = minimal_dir / "r.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    recipe = load_recipe(path, ["training.per_device_train_batch_size=8"])
    pf = preflight(recipe)
    assert pf.ok
    assert pf.batches is not None and pf.batches.generation_batch_size == 8
    assert recipe.training.get("beta") == 0.0  # the installed TRL's default


def test_schema_is_json_schema_with_trl_fields() -> None:
    result = run_cli("schema")
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["$schema"].endswith("2020-12/schema")
    # `data` and `rewards` may be left out beside an `environment` that serves prompts and owns the reward
    assert set(schema["required"]) == {"model"}
    training = schema["$defs"]["TrainingSection"]["properties"]
    assert training["num_generations"]["default"] == 8
    assert "output_dir" not in training  # owned by output.dir
    assert "extends" in schema["properties"]


def test_recipe_reference_doc_is_up_to_date() -> None:
    from grpo_cli.recipe.docs import recipe_markdown

    doc = ROOT / "docs" / "recipes.md"
    assert doc.read_text(encoding="utf-8") == recipe_markdown(), (
        "docs/recipes.md is stale: run `grpo schema --markdown --out docs/recipes.md`")


def test_cli_import_stays_light() -> None:
    code = ("import sys, grpo_cli.cli, grpo_cli.recipe.loader, grpo_cli.validation.checks; "
            "heavy = [m for m in ('torch', 'transformers', 'trl', 'datasets', 'peft') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_only_read_and_print_commands_run_without_the_garbage_collector() -> None:
    """`main` starts with the collector off; a command that can run for hours (anything but validate, schema
    and help) must get it back, or a long run would keep every reference cycle it ever made."""
    code = ("import atexit, gc, sys; atexit.register(lambda: print('collector on' if gc.isenabled() else 'off')); "
            "sys.argv = ['grpo', *sys.argv[1:]]; from grpo_cli.cli import main; main()")
    ran = subprocess.run([sys.executable, "-c", code, "report", "no-such-run-dir"], capture_output=True, text=True,
                         cwd=ROOT)
    assert ran.returncode == 2 and ran.stdout.strip().endswith("collector on"), ran.stdout + ran.stderr
    checked = subprocess.run([sys.executable, "-c", code, "validate", "recipes/gsm8k.yaml"], capture_output=True,
                             text=True, cwd=ROOT)
    assert checked.returncode == 0 and "is valid" in checked.stdout and "collector" not in checked.stdout


def test_validate_does_not_import_heavy_libraries() -> None:
    code = ("import sys; from grpo_cli.cli import app; from typer.testing import CliRunner; "
            f"r = CliRunner().invoke(app, ['validate', r'{RECIPES / 'gsm8k.yaml'}']); "
            "heavy = [m for m in ('torch', 'transformers', 'trl', 'datasets', 'peft') if m in sys.modules]; "
            "print(r.exit_code, ','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def test_unquoted_no_strategy_is_understood(minimal_dir: Path) -> None:
    """YAML reads `save_strategy=no` as false; TRL wants the string "no"."""
    from grpo_cli import load_recipe

    path = minimal_dir / "r.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    recipe = load_recipe(path, ["training.save_strategy=no", "training.eval_strategy=no"])
    assert recipe.training.values()["save_strategy"] == "no"
    assert recipe.training.values()["eval_strategy"] == "no"


def test_vllm_mode_off_unquoted_means_off_in_a_file_and_in_an_override(minimal_dir: Path) -> None:
    # YAML 1.1 reads `off` as false; the fix texts tell users to write `launch.vllm.mode=off`, so it must work.
    from grpo_cli.recipe import load_recipe
    from tests.conftest import MINIMAL

    recipe = minimal_dir / "recipe.yaml"
    recipe.write_text(MINIMAL + "launch:\n  vllm: {mode: off}\n")
    assert load_recipe(recipe).launch.vllm.mode == "off"
    assert load_recipe(recipe, ["launch.vllm.mode=colocate", "launch.vllm.mode=off"]).launch.vllm.mode == "off"
