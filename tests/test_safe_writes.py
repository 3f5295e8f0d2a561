"""What grpo writes never loses a user's file and never runs what a value smuggles in (issue 35): `grpo import -o`
(no overwrite without --force, never the source, whole or nothing, interrupted cleanly), the GGUF conversion cache
(interrupted and killed conversions leave nothing), and every value in a generated Slurm or SkyPilot script."""

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

from tests.conftest import RECIPES, ROOT, run_cli, sigint_as_a_terminal

TRL_CONFIG = ROOT / "tests" / "fixtures" / "imports" / "trl" / "clis_grpo_config.yaml"
DEMO = RECIPES / "demo.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _paragraph(result, *needles: str) -> str:
    assert result.exit_code == 2, result
    assert "Traceback" not in result.output, result
    flat = " ".join(result.output.split())
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{result.output}"
    return flat


# ---------------------------------------------------------------------------- grpo import -o


def test_import_never_overwrites_without_force_and_never_the_source(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    shutil.copy(TRL_CONFIG, config)
    mine = tmp_path / "mine.yaml"
    mine.write_text("my recipe\n", encoding="utf-8")
    _paragraph(run_cli("import", "trl", config, "-o", mine), "-o", "already exists", "--force")
    assert mine.read_text() == "my recipe\n"
    source = config.read_bytes()
    for extra in ([], ["--force"]):
        _paragraph(run_cli("import", "trl", config, "-o", config, *extra), "the config being imported")
        assert config.read_bytes() == source
    (tmp_path / "link.yaml").symlink_to(config)  # the source under another name is still the source
    _paragraph(run_cli("import", "trl", config, "-o", tmp_path / "link.yaml", "--force"), "the config being imported")
    assert config.read_bytes() == source
    forced = run_cli("import", "trl", config, "-o", mine, "--force")
    assert forced.exit_code == 0, forced
    assert mine.read_text().startswith("# Converted by `grpo import trl`")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "link.yaml", "mine.yaml"]  # no temp left


def test_import_onto_a_directory_or_into_a_missing_one(tmp_path: Path) -> None:
    _paragraph(run_cli("import", "trl", TRL_CONFIG, "-o", tmp_path), "-o", "is a directory", "recipe.yaml")
    # a recipe that does not validate is written marked NOT VALID (the user finishes it), its directory made for it
    bad = run_cli("import", "trl", TRL_CONFIG, "training.num_generations=3", "-o", tmp_path / "new" / "r.yaml")
    assert bad.exit_code == 2 and "marked NOT VALID" in bad.output, bad
    assert (tmp_path / "new" / "r.yaml").read_text().startswith("# NOT VALID")
    # a write that fails makes no directory: a file stands where a parent directory would go
    (tmp_path / "blocker").write_text("")
    failed = run_cli("import", "trl", TRL_CONFIG, "-o", tmp_path / "blocker" / "sub" / "r.yaml")
    assert failed.exit_code == 2 and "cannot write" in failed.output, failed
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


def test_write_atomic_interrupted_mid_write_keeps_the_old_file(tmp_path: Path) -> None:
    """A write of 200 MB stopped by SIGTERM while it runs: the target keeps its text, the temporary file is gone."""
    target = tmp_path / "file.txt"
    target.write_text("old\n")
    code = ("import sys; from pathlib import Path; from grpo_cli.paths import write_atomic\n"
            "print('go', flush=True)\n"
            "try:\n    write_atomic(Path(sys.argv[1]), 'x' * 200_000_000)\n"
            "except KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], env=ENV, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "go\n"
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".file.txt.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) in (0, 130)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]
    text = target.read_text()
    assert text == "old\n" or len(text) == 200_000_000


# ---------------------------------------------------------------------------- generated launch scripts


def _stubs(d: Path) -> dict[str, str]:
    """Stand-ins for Slurm and grpo that record what they are given (one line of arguments per call)."""
    bin_ = d / "bin"
    bin_.mkdir()
    stubs = {"scontrol": "echo node1", "srun": 'while [ "${1#--}" != "$1" ]; do shift; done; exec "$@"',
             "grpo": f'printf "%s\\n" "$@" > {d}/grpo.args', "scancel": "true"}
    for name, body in stubs.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    return {"PATH": f"{bin_}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node1", "SLURM_PROCID": "0", "HOME": str(d)}


@pytest.mark.parametrize("flag, value", [
    ("--partition", "gpu\ntouch PWNED"), ("--partition", "gpu; touch PWNED"), ("--partition", "$(touch PWNED)"),
    ("--time", "forever"), ("--time", "1:00:00\ntouch PWNED"), ("--time", "`touch PWNED`"),
])
def test_slurm_flags_that_would_inject_a_line_are_refused(tmp_path: Path, monkeypatch, flag: str, value: str) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2", "--gpus-per-node", "0",
                     flag, value, "-o", "job.sbatch")
    _paragraph(result, flag, "Slurm")
    assert list(tmp_path.iterdir()) == []


def test_recipe_names_and_overrides_reach_the_job_as_text_never_as_commands(tmp_path: Path, monkeypatch) -> None:
    """A recipe file named with `;`, `$()` and quotes, overrides holding `$(...)`, backquotes and a newline: the
    script passes bash -n, and run (both the training branch and the wrong-task-count branch, which prints the
    regenerating command) it creates no file and hands grpo the overrides exactly as typed."""
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "a;b $(touch PWNED) 'q\".yaml"
    shutil.copy(DEMO, recipe)
    hostile = ["training.seed=1", "output.run_name=$(touch PWNED)`touch PWNED2`;touch PWNED3 'x\" \\"]
    result = run_cli("launch", "slurm", recipe.name, "launch.profile=ddp", "launch.num_processes=2", *hostile,
                     "--gpus-per-node", "0", "--partition", "gpu,debug", "--time", "2-00:00:00", "--setup", "",
                     "-o", "job.sbatch")
    assert result.exit_code == 0, result
    script = tmp_path / "job.sbatch"
    text = script.read_text()
    assert "#SBATCH --job-name=grpo-a-b-touch-PWNED-q" in text.splitlines()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    env = _stubs(tmp_path)
    wrong = subprocess.run(["bash", str(script)], env={**env, "SLURM_NTASKS": "3"}, capture_output=True, text=True,
                           timeout=60)
    assert wrong.returncode == 2 and "regenerate it with: grpo launch slurm" in wrong.stderr, wrong.stderr
    assert "$(touch PWNED)" in wrong.stderr and "--nodes 3" in wrong.stderr
    ran = subprocess.run(["bash", str(script)], env={**env, "SLURM_NTASKS": "1"}, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    args = (tmp_path / "grpo.args").read_text().splitlines()
    assert args[:2] == ["train", str(recipe)] and hostile[1] in args
    assert not list(tmp_path.glob("PWNED*")), "a value in the script ran as a command"


def test_paths_with_line_breaks_never_reach_a_script(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    odd = tmp_path / "x\n#SBATCH --wrap=touch PWNED"
    odd.mkdir()
    shutil.copy(DEMO, odd / "demo.yaml")
    args = ["launch.profile=ddp", "launch.num_processes=2", "--gpus-per-node", "0"]
    _paragraph(run_cli("launch", "slurm", odd / "demo.yaml", *args, "-o", "a.sbatch"), "RECIPE", "line break")
    _paragraph(run_cli("launch", "slurm", DEMO, *args, "-o", odd / "a.sbatch"), "--out", "line break")
    quoted = tmp_path / 'q"uote'
    quoted.mkdir()
    _paragraph(run_cli("launch", "slurm", DEMO, *args, "-o", quoted / "a.sbatch"), "--out", '"')
    assert not list(tmp_path.rglob("*.sbatch"))


def test_skypilot_values_are_checked_and_the_task_is_plain_yaml(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "my run; $(touch PWNED).yaml"
    shutil.copy(DEMO, recipe)
    args = ["launch", "skypilot", recipe.name, "launch.profile=ddp", "launch.num_processes=2"]
    _paragraph(run_cli(*args, "--accelerator", "H100\nrun: touch PWNED", "-o", "t.yaml"), "--accelerator")
    assert not (tmp_path / "t.yaml").exists()
    result = run_cli(*args, "output.run_name=$(touch PWNED)", "-o", "t.yaml")  # .venv below: the stubs stay first
    assert result.exit_code == 0, result
    task = yaml.safe_load((tmp_path / "t.yaml").read_text())
    assert task["name"] == "grpo-my-run-touch-PWNED" and set(task) == {"name", "num_nodes", "resources", "workdir",
                                                                        "setup", "run"}
    env = {**_stubs(tmp_path), "SKYPILOT_NODE_IPS": "10.0.0.1", "SKYPILOT_NODE_RANK": "0"}
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "activate").write_text("")
    ran = subprocess.run(["bash", "-c", task["run"]], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "output.run_name=$(touch PWNED)" in (tmp_path / "grpo.args").read_text().splitlines()
    assert not list(tmp_path.glob("PWNED*"))


def test_gpus_per_node_that_would_sit_idle_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=4", "--nodes", "2",
                     "--gpus-per-node", "3", "-o", "j.sbatch")
    _paragraph(result, "--gpus-per-node", "reserves 1 GPU(s) on each node that nothing uses", "--gpus-per-node 2",
               "launch.num_processes=6")
    assert not (tmp_path / "j.sbatch").exists()


def test_a_launch_file_is_never_written_over_its_recipe(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "demo.yaml"
    shutil.copy(DEMO, recipe)
    before = recipe.read_bytes()
    args = ["demo.yaml", "launch.profile=ddp", "launch.num_processes=2"]
    _paragraph(run_cli("launch", "slurm", *args, "--gpus-per-node", "0", "-o", "demo.yaml", "--force"),
               "--out", "is the recipe")
    _paragraph(run_cli("launch", "skypilot", *args, "-o", "demo.yaml", "--force"), "--out", "is the recipe")
    assert recipe.read_bytes() == before


def test_an_interrupt_a_library_wrapped_is_still_an_interrupt() -> None:
    """SIGTERM while pydantic builds a validator arrives as a SchemaError whose text ends in the KeyboardInterrupt
    (seen once in 20 interrupted imports): it ends like any interrupt, exit 130 and no traceback."""
    import pydantic_core
    import typer

    from grpo_cli.cli.base import run_guarded

    def wrapped() -> None:
        raise pydantic_core.SchemaError('Error building "literal" validator:\n  KeyboardInterrupt: ')

    with pytest.raises(typer.Exit) as stopped:
        run_guarded(wrapped)
    assert stopped.value.exit_code == 130
    with pytest.raises(ValueError):  # any other library error still surfaces (as a bug, with its traceback)
        run_guarded(lambda: int("x"))
