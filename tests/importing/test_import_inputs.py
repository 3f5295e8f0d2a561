"""What `grpo import` refuses in its inputs (a script that is not Python source, a config of the wrong shape,
a typo, an override that cannot apply, a path with a line break) and the odd input it reads right: one
paragraph, exit 2, nothing written; and what it writes with `-o` (never over a file without --force, never over
its source, whole or nothing, also when interrupted)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, assert_paragraph, run_cli, sigint_as_a_terminal

TRL_CONFIG = ROOT / "tests" / "fixtures" / "imports" / "trl" / "clis_grpo_config.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("name, content, needles", [
    ("syntax.py", b"from trl import GRPOConfig\ndef f(:\n", ["not valid Python at line 2", "column"]),
    ("binary.py", b"\x7fELF\x00\x00\x01" * 20, ["binary file"]),
    ("latin1.py", "x = 'été'\n".encode("latin-1"), ["not UTF-8", "line 1"]),
    ("folder.py", None, ["is a directory"]),
])
def test_import_of_a_trl_script_that_is_not_python_source(tmp_path: Path, name: str, content, needles) -> None:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert_paragraph(run_cli("import", "trl", path), str(path), *needles)


@pytest.mark.parametrize("kind, text, needles", [
    ("open-r1", "model_name_or_path: Q/Q\nreward_funcs: [accuracy]\nreward_weights: [heavy]\n",
     ["reward_weights[0] is 'heavy'", "not a number"]),
    ("trl", "model_name_or_path: Q/Q\nnum_processes: four\n", ["num_processes is 'four'", "whole number"]),
    ("axolotl", "base_model: Q/Q\ndatasets: 5\n", ["datasets[0] is 5", "mapping"]),
    ("axolotl", "base_model: Q/Q\ntrl: [1, 2]\n", ["trl is [1, 2]", "mapping"]),
    ("axolotl", "base_model: Q/Q\ntrl: {reward_funcs: [r.f], reward_weights: [x]}\n", ["trl.reward_weights[0]"]),
    ("axolotl", "base_model: Q/Q\ndatasets: [{path: a/b}]\nval_set_size: some\n", ["val_set_size is 'some'"]),
    ("open-r1", "", ["the config is empty"]),
    ("open-r1", "model_name_or_path: [Qwen,\n  x: y\n", ["not valid YAML at line 3", "opened at line 1"]),
    ("open-r1", "base_model: Q/Q\nrl: grpo\ndatasets: [{path: a/b}]\n", ["looks like an Axolotl config",
                                                                        "grpo import axolotl"]),
    ("axolotl", "model_name_or_path: Q/Q\nreward_funcs: [accuracy]\n", ["looks like an open-r1",
                                                                      "grpo import open-r1"]),
])
def test_import_of_a_config_with_the_wrong_shape(tmp_path: Path, kind: str, text: str, needles: list[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "r.yaml"
    assert_paragraph(run_cli("import", kind, path, "-o", out), "config.yaml", *needles)
    assert not out.exists()


def test_a_typo_in_an_imported_config_is_a_problem_not_a_quiet_loss(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\ndataset_name: trl-lib/DeepMath-103K\n"
                    "reward_funcs: [accuracy_reward]\nlearning_rat: 1.0e-5\n", encoding="utf-8")
    out = tmp_path / "r.yaml"
    result = run_cli("import", "trl", path, "-o", out)  # a report of what converted, not a one-paragraph refusal
    assert result.exit_code == 2 and "Traceback" not in result.output, result
    flat = " ".join(result.output.split())
    assert "learning_rat" in flat and "did you mean learning_rate" in flat and "NOT VALID" in flat, result
    assert out.read_text().startswith("# NOT VALID")  # written for the user to finish, never passed as valid
    path.write_text(path.read_text().replace("learning_rat:", "learning_rate:"), encoding="utf-8")
    fixed = run_cli("import", "trl", path, "-o", out, "--force")
    assert fixed.exit_code == 0 and "fully" in fixed.output, fixed


def test_one_reward_name_as_a_string_is_one_reward_not_its_characters(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\ndataset_name: a/b\nreward_funcs: format\n"
                    "reward_weights: 0.5\n", encoding="utf-8")
    result = run_cli("import", "open-r1", path, "-o", tmp_path / "r.yaml")
    assert result.exit_code == 0, result
    assert yaml.safe_load((tmp_path / "r.yaml").read_text())["rewards"] == [{"name": "format", "weight": 0.5}]


@pytest.mark.parametrize("override, needles", [
    ("model.name_or_path.x=1", ["'model.name_or_path.x' sets a key inside a value that is not a section"]),
    ("training.seed=[1,", ["'training.seed=[1,' is not valid YAML"]),
])
def test_import_overrides_that_cannot_apply(tmp_path: Path, override: str, needles: list[str]) -> None:
    config = ROOT / "tests" / "fixtures" / "imports" / "trl" / "clis_grpo_config.yaml"
    assert_paragraph(run_cli("import", "trl", config, override, "-o", tmp_path / "r.yaml"), "command line", *needles)
    assert not (tmp_path / "r.yaml").exists()


def test_import_refuses_paths_with_line_breaks(tmp_path: Path) -> None:
    script = ROOT / "tests" / "fixtures" / "imports" / "trl" / "train_grpo.py"
    assert_paragraph(run_cli("import", "trl", script, "-o", tmp_path / "bad\nname.yaml"), "-o", "line break")
    odd = tmp_path / "sc\nript.py"
    shutil.copy(script, odd)
    assert_paragraph(run_cli("import", "trl", odd, "-o", tmp_path / "r.yaml"), "CONFIG", "line break")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sc\nript.py"]


def test_import_never_overwrites_without_force_and_never_the_source(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    shutil.copy(TRL_CONFIG, config)
    mine = tmp_path / "mine.yaml"
    mine.write_text("my recipe\n", encoding="utf-8")
    assert_paragraph(run_cli("import", "trl", config, "-o", mine), "-o", "already exists", "--force")
    assert mine.read_text() == "my recipe\n"
    source = config.read_bytes()
    for extra in ([], ["--force"]):
        assert_paragraph(run_cli("import", "trl", config, "-o", config, *extra), "the config being imported")
        assert config.read_bytes() == source
    (tmp_path / "link.yaml").symlink_to(config)  # the source under another name is still the source
    assert_paragraph(run_cli("import", "trl", config, "-o", tmp_path / "link.yaml", "--force"),
                     "the config being imported")
    assert config.read_bytes() == source
    forced = run_cli("import", "trl", config, "-o", mine, "--force")
    assert forced.exit_code == 0, forced
    assert mine.read_text().startswith("# Converted by `grpo import trl`")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "link.yaml", "mine.yaml"]  # no temp left


def test_import_onto_a_directory_or_into_a_missing_one(tmp_path: Path) -> None:
    assert_paragraph(run_cli("import", "trl", TRL_CONFIG, "-o", tmp_path), "-o", "is a directory", "recipe.yaml")
    # a recipe that does not validate is written marked NOT VALID (the user finishes it), its directory made for it
    bad = run_cli("import", "trl", TRL_CONFIG, "training.num_generations=3", "-o", tmp_path / "new" / "r.yaml")
    assert bad.exit_code == 2 and "marked NOT VALID" in bad.output, bad  # a recipe written to finish, not a refusal
    assert (tmp_path / "new" / "r.yaml").read_text().startswith("# NOT VALID")
    # a write that fails makes no directory: a file stands where a parent directory would go
    (tmp_path / "blocker").write_text("")
    failed = run_cli("import", "trl", TRL_CONFIG, "-o", tmp_path / "blocker" / "sub" / "r.yaml")
    assert_paragraph(failed, "cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "new"]
    good = run_cli("import", "trl", TRL_CONFIG, "-o", tmp_path / "new" / "r.yaml", "--force")
    assert good.exit_code == 0 and (tmp_path / "new" / "r.yaml").is_file(), good


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_import_leaves_the_old_file_or_the_new_one_and_nothing_else(tmp_path: Path, sig) -> None:
    """`grpo import -o mine.yaml --force` stopped at several moments: mine.yaml is always whole (the old text or
    the new recipe), "wrote" is printed only when the new recipe is there, and no temporary file stays."""
    old = "my recipe\n" * 1000
    outcomes = set()
    for delay in (0.0, 0.5, 1.0, 1.5, 2.5, 4.0):
        mine = tmp_path / "mine.yaml"
        mine.write_text(old, encoding="utf-8")
        proc = subprocess.Popen([sys.executable, "-m", "grpo_cli", "import", "trl", str(TRL_CONFIG), "-o", str(mine),
                                 "--force"], env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, preexec_fn=sigint_as_a_terminal)
        time.sleep(delay)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
        text = mine.read_text()
        assert text == old or (text.startswith("# Converted by") and text.endswith("\n") and yaml.safe_load(text))
        assert ("wrote " in out) == (text != old), out
        assert "Traceback" not in out, out
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.yaml"], list(tmp_path.iterdir())
        outcomes.add(text == old)
    assert True in outcomes  # at least one signal arrived before the write
