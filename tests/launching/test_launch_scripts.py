"""Every value in a generated Slurm or SkyPilot script reaches the job as text, never as a command: flags that would
inject a line are refused, recipe names, overrides and paths are quoted, a launch file is never written over its
recipe."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


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
    assert_paragraph(result, flag, "Slurm")
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
    assert_paragraph(run_cli("launch", "slurm", odd / "demo.yaml", *args, "-o", "a.sbatch"), "RECIPE", "line break")
    assert_paragraph(run_cli("launch", "slurm", DEMO, *args, "-o", odd / "a.sbatch"), "--out", "line break")
    quoted = tmp_path / 'q"uote'
    quoted.mkdir()
    assert_paragraph(run_cli("launch", "slurm", DEMO, *args, "-o", quoted / "a.sbatch"), "--out", '"')
    assert not list(tmp_path.rglob("*.sbatch"))


def test_skypilot_values_are_checked_and_the_task_is_plain_yaml(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "my run; $(touch PWNED).yaml"
    shutil.copy(DEMO, recipe)
    args = ["launch", "skypilot", recipe.name, "launch.profile=ddp", "launch.num_processes=2"]
    assert_paragraph(run_cli(*args, "--accelerator", "H100\nrun: touch PWNED", "-o", "t.yaml"), "--accelerator")
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
    assert_paragraph(result, "--gpus-per-node", "reserves 1 GPU(s) on each node that nothing uses", "--gpus-per-node 2",
               "launch.num_processes=6")
    assert not (tmp_path / "j.sbatch").exists()


def test_a_launch_file_is_never_written_over_its_recipe(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "demo.yaml"
    shutil.copy(DEMO, recipe)
    before = recipe.read_bytes()
    args = ["demo.yaml", "launch.profile=ddp", "launch.num_processes=2"]
    assert_paragraph(run_cli("launch", "slurm", *args, "--gpus-per-node", "0", "-o", "demo.yaml", "--force"),
               "--out", "is the recipe")
    assert_paragraph(run_cli("launch", "skypilot", *args, "-o", "demo.yaml", "--force"), "--out", "is the recipe")
    assert recipe.read_bytes() == before
