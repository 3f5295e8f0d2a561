"""`grpo launch slurm|skypilot`: the files come from the recipe, pass validation first, and are valid shell/YAML."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import RECIPES, run_cli

DEMO = RECIPES / "demo.yaml"


def _sbatch(text: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", text, re.M))


def _srun_train(text: str) -> list[str]:
    """The `grpo train` words one training task runs (the single-quoted bash -c body of the srun line)."""
    line = next(x for x in text.splitlines() if x.startswith("srun") and "grpo train" in x)
    body = shlex.split(line)[-1]
    assert body.startswith("exec grpo train ")
    return shlex.split(body, posix=True)[1:]


def test_slurm_script_for_two_cpu_nodes_comes_from_the_recipe(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2",
                     "launch.main_process_port=29611", "--nodes", "2", "--gpus-per-node", "0", "--time", "00:10:00",
                     "-o", "job.sbatch")
    assert result.exit_code == 0, result
    text = (tmp_path / "job.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")]).returncode == 0  # valid shell
    assert _sbatch(text) == {"job-name": "grpo-demo", "nodes": "2", "ntasks": "2", "ntasks-per-node": "1",
                             "signal": "TERM@300", "time": "00:10:00", "output": f"{tmp_path}/%x-%j.out"}
    words = _srun_train(text)
    assert words[:3] == ["grpo", "train", str(DEMO)]
    assert "launch.main_process_port=29611" in words  # the user's overrides travel with the command
    flags = dict(zip(words, words[1:], strict=False))  # each flag -> the word after it
    assert (flags["--num-machines"], flags["--num-processes"]) == ("2", "2")
    assert (flags["--machine-rank"], flags["--main-process-ip"]) == ("$SLURM_PROCID", "$MAIN_NODE")
    assert "vllm-serve" not in text


def test_slurm_gpu_layout_and_a_dedicated_vllm_node(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["launch", "slurm", RECIPES / "gsm8k-zero3.yaml", "launch.num_processes=16", "--nodes", "2", "-o", "z.sh"]
    assert run_cli(*args, "--vllm-node").exit_code == 0
    text = (tmp_path / "z.sh").read_text()
    assert (_sbatch(text)["nodes"], _sbatch(text)["gpus-per-node"]) == ("3", "8")  # 2 x 8 training + 1 server
    server = next(x for x in text.splitlines() if "vllm-serve" in x)
    assert server.startswith('srun --nodes=1 --ntasks=1 --nodelist="$VLLM_NODE" grpo vllm-serve')
    assert "launch.vllm.host=0.0.0.0" in server
    words = _srun_train(text)
    assert "launch.vllm.host=$VLLM_NODE" in words and "launch.vllm.server_gpus=0" in words
    assert '--exclude="$VLLM_NODE"' in text and subprocess.run(["bash", "-n", str(tmp_path / "z.sh")]).returncode == 0


def test_launch_refuses_what_cannot_run_and_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    no_server = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2", "--nodes", "2",
                        "--vllm-node", "-o", "a.sh")
    assert no_server.exit_code == 2 and "launch.vllm.mode=server" in no_server.output
    single = run_cli("launch", "slurm", DEMO, "--nodes", "2", "-o", "b.sh")
    assert single.exit_code == 2 and "multi-process profile" in single.output
    # `grpo validate` runs first: 6 completions per process x 2 processes do not split into groups of 8.
    batch = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2",
                    "training.per_device_train_batch_size=6", "--nodes", "2", "--gpus-per-node", "0", "-o", "c.sh")
    assert batch.exit_code == 2 and "num_generations" in batch.output
    assert not any(tmp_path.iterdir())


def test_skypilot_task_comes_from_the_recipe(tmp_path: Path, monkeypatch) -> None:
    root = RECIPES.parent
    monkeypatch.chdir(root)
    out = tmp_path / "task.yaml"
    result = run_cli("launch", "skypilot", "recipes/gsm8k-zero3.yaml", "launch.vllm.mode=colocate",
                     "launch.num_processes=16", "--nodes", "2", "--accelerator", "A100-80GB", "-o", out)
    assert result.exit_code == 0, result
    task = yaml.safe_load(out.read_text())
    assert (task["name"], task["num_nodes"], task["resources"]) == ("grpo-gsm8k-zero3", 2,
                                                                    {"accelerators": "A100-80GB:8"})
    assert task["workdir"] == "."
    assert task["setup"].strip() == 'python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e ' \
                                    '".[deepspeed,vllm]"'  # the README install, with the extras the recipe needs
    train = next(x for x in task["run"].splitlines() if x.startswith("grpo train"))
    words = shlex.split(train)
    assert words[:5] == ["grpo", "train", "recipes/gsm8k-zero3.yaml", "launch.vllm.mode=colocate",
                         "launch.num_processes=16"]
    assert words[words.index("--num-machines") + 1] == "2" and words[words.index("--num-processes") + 1] == "16"
    assert '--machine-rank "$SKYPILOT_NODE_RANK"' in train and '--main-process-ip "$MAIN_IP"' in train
    assert 'MAIN_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)' in task["run"]


@pytest.mark.parametrize("verb", ["slurm", "skypilot"])
def test_launch_help_lists_the_options(verb: str) -> None:
    result = run_cli("launch", verb, "--help")
    assert result.exit_code == 0 and "--nodes" in result.output
