"""`grpo launch slurm|skypilot`: the files come from the recipe, pass validation first, and are valid shell/YAML."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def _sbatch(text: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", text, re.M))


def _srun_train(text: str) -> list[str]:
    """The `grpo train` words one training task runs (the single-quoted bash -c body of the srun line)."""
    line = next(x for x in text.splitlines() if x.startswith("srun") and "grpo train" in x)
    body = shlex.split(line)[-1]
    assert body.startswith("exec grpo train ") or "; exec grpo train " in body
    return shlex.split(body[body.index("exec grpo train "):], posix=True)[1:]


def test_slurm_script_for_two_cpu_nodes_comes_from_the_recipe(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2",
                     "launch.main_process_port=29611", "--nodes", "2", "--gpus-per-node", "0", "--time", "00:10:00",
                     "-o", "job.sbatch")
    assert result.exit_code == 0, result
    text = (tmp_path / "job.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")]).returncode == 0  # valid shell
    assert _sbatch(text) == {"job-name": "grpo-demo", "nodes": "2", "ntasks": "2", "ntasks-per-node": "1",
                             "signal": "TERM@300", "time": "00:10:00", "output": f'"{tmp_path}/%x-%j.out"'}
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
    training, server_node = text.split("#SBATCH hetjob\n")  # two components: the server node is no training node
    assert (_sbatch(training)["nodes"], _sbatch(training)["gpus-per-node"]) == ("2", "8")  # 2 x 8 training
    assert (_sbatch(server_node)["nodes"], _sbatch(server_node)["gpus-per-node"]) == ("1", "1")  # server_gpus
    server = next(x for x in text.splitlines() if "vllm-serve" in x)
    assert server.startswith("srun --het-group=1 --nodes=1 --ntasks=1 grpo vllm-serve")
    assert "launch.vllm.host=0.0.0.0" in server
    assert text.count("VLLM_PID=$!") == 1
    words = _srun_train(text)
    assert "launch.vllm.host=$VLLM_NODE" in words and "launch.vllm.server_gpus=0" in words
    assert "srun --het-group=0 " in text and subprocess.run(["bash", "-n", str(tmp_path / "z.sh")]).returncode == 0
    echo = next(x for x in text.splitlines() if "regenerate it with" in x)  # run it as the job's shell would
    said = subprocess.run(["bash", "-c", echo], env={"TRAIN_TASKS": "3"}, capture_output=True, text=True).stderr
    regenerate = said.split("regenerate it with: ", 1)[1].strip()
    recipe = RECIPES / "gsm8k-zero3.yaml"
    assert regenerate == f"grpo launch slurm {recipe} launch.num_processes=16 --nodes 3 --vllm-node"


def test_every_cluster_problem_at_once_with_the_command_that_fixes_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(RECIPES.parent)
    out = tmp_path / "z.sbatch"
    first = run_cli("launch", "slurm", "recipes/gsm8k-zero3.yaml", "--nodes", "2", "--time", "1:00:00", "-o", out)
    assert first.exit_code == 2 and not out.exists()
    text = " ".join(first.output.split())
    assert "2 problems" in text and "--vllm-node" in text and "launch.num_processes=7 cannot be split" in text
    fixed = text.split("Corrected command: ", 1)[1]
    assert fixed == (f"grpo launch slurm recipes/gsm8k-zero3.yaml launch.num_processes=16 --nodes 2 --vllm-node "
                     f"--time 1:00:00 -o {out}")
    again = run_cli(*shlex.split(fixed)[1:])  # the corrected command, as printed
    assert again.exit_code == 0, again.output
    assert _sbatch(out.read_text().split("#SBATCH hetjob")[0])["gpus-per-node"] == "8"


def test_the_readme_cluster_example_works_as_printed(tmp_path: Path, monkeypatch) -> None:
    readme = (RECIPES.parent / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("grpo launch slurm recipes/"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").symlink_to(RECIPES)
    result = run_cli(*shlex.split(line.split("#")[0])[1:])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.glob("outputs/*/launch/*.sbatch"))  # with the run, not in the repository


def test_launch_refuses_what_cannot_run_and_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    no_server = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2", "--nodes", "2",
                        "--vllm-node", "-o", "a.sh")
    assert_paragraph(no_server, "launch.vllm.mode=server")
    single = run_cli("launch", "slurm", DEMO, "--nodes", "2", "-o", "b.sh")
    assert_paragraph(single, "multi-process profile")
    assert "launch.profile=ddp" in single.output and "--profile" not in single.output  # an override launch accepts
    # `grpo validate` runs first: 6 completions per process x 2 processes do not split into groups of 8.
    batch = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2",
                    "training.per_device_train_batch_size=6", "--nodes", "2", "--gpus-per-node", "0", "-o", "c.sh")
    assert_paragraph(batch, "num_generations")
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


@pytest.mark.parametrize("verb", ["slurm", "skypilot"])
def test_an_unwritable_out_is_bad_input_not_a_traceback(verb: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(DEMO, tmp_path / "demo.yaml")
    result = run_cli("launch", verb, "demo.yaml", "launch.profile=ddp", "launch.num_processes=2", "--gpus-per-node",
                     "2", "-o", "missing/dir/x")
    assert result.exit_code == 2, result.output
    assert "--out" in result.output and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.yaml"]  # nothing half-written


def test_slurm_log_path_with_spaces_is_quoted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my jobs").mkdir()
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.num_processes=2", "--gpus-per-node", "0",
                     "-o", "my jobs/job.sbatch")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "my jobs" / "job.sbatch").read_text()
    assert f'#SBATCH --output="{tmp_path}/my jobs/%x-%j.out"' in text.splitlines()


def test_more_processes_per_node_than_gpus_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    over = run_cli("launch", "slurm", RECIPES / "gsm8k-zero3.yaml", "launch.vllm.mode=colocate",
                   "launch.num_processes=16", "--nodes", "2", "--gpus-per-node", "2", "-o", "a.sh")
    assert_paragraph(over, "--gpus-per-node", "8 training process")
    server = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.vllm.mode=server",
                     "launch.num_processes=2", "--gpus-per-node", "2", "-o", "b.sh")  # no GPU left for the server
    assert_paragraph(server, "vLLM server", "--gpus-per-node 3")
    assert not any(tmp_path.iterdir())


def _stub_bin(d: Path) -> dict[str, str]:
    """Stand-ins for the scheduler and for grpo: a server that records its pid and devices, a training that fails."""
    bin_ = d / "bin"
    bin_.mkdir()
    stubs = {"scontrol": "echo node1",
             "srun": 'while [ "${1#--}" != "$1" ]; do shift; done; exec "$@"',
             "grpo": f'echo "$1 $$ ${{CUDA_VISIBLE_DEVICES:-none}}" >> {d}/grpo.log\n'
                     '[ "$1" = vllm-serve ] && exec sleep 120 >/dev/null 2>&1\n'
                     f'until grep -q vllm-serve {d}/grpo.log; do sleep 0.05; done\nexit 3'}  # waits for its server
    for name, body in stubs.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"}


def _server_stopped(d: Path) -> tuple[dict[str, str], bool]:
    """What each grpo verb saw as CUDA_VISIBLE_DEVICES, and whether the server is gone (killed if not)."""
    seen = {w[0]: w for w in (line.split() for line in (d / "grpo.log").read_text().splitlines())}
    pid = int(seen["vllm-serve"][1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        return {k: v[2] for k, v in seen.items()}, False
    return {k: v[2] for k, v in seen.items()}, True


def test_slurm_server_on_the_training_node_gets_the_last_gpus_and_stops_when_training_fails(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "launch.vllm.mode=server",
                     "launch.num_processes=2", "--gpus-per-node", "3", "--setup", "", "-o", "job.sbatch")
    assert result.exit_code == 0, result.output
    env = {**_stub_bin(tmp_path), "SLURM_JOB_NODELIST": "node1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
           "CUDA_VISIBLE_DEVICES": "4,5,6"}
    proc = subprocess.run(["bash", "job.sbatch"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr  # training's failure is the job's
    devices, stopped = _server_stopped(tmp_path)
    assert stopped, "the vLLM server outlived the job"
    assert devices == {"vllm-serve": "6", "train": "4,5"}


def test_skypilot_server_stops_when_training_fails(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(DEMO, tmp_path / "demo.yaml")
    result = run_cli("launch", "skypilot", "demo.yaml", "launch.profile=ddp", "launch.vllm.mode=server",
                     "launch.num_processes=2", "-o", "task.yaml")
    assert result.exit_code == 0, result.output
    task = yaml.safe_load((tmp_path / "task.yaml").read_text())
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "activate").write_text("")
    env = {**_stub_bin(tmp_path), "SKYPILOT_NODE_IPS": "10.0.0.1", "SKYPILOT_NODE_RANK": "0"}
    proc = subprocess.run(["bash", "-c", task["run"]], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert _server_stopped(tmp_path)[1], "the vLLM server outlived the task"


def test_skypilot_outside_grpo_source_installs_the_released_package(tmp_path: Path, monkeypatch) -> None:
    from grpo_cli.version import __version__

    monkeypatch.chdir(tmp_path)
    shutil.copy(DEMO, tmp_path / "demo.yaml")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "my-experiments"\nversion = "1"\n')
    result = run_cli("launch", "skypilot", "demo.yaml", "launch.profile=zero3", "launch.num_processes=2",
                     "-o", "t.yaml")
    assert result.exit_code == 0, result.output
    setup = yaml.safe_load((tmp_path / "t.yaml").read_text())["setup"]
    assert f"pip install -q torch==2.13.0 'grpo-cli[deepspeed]=={__version__}'" in setup and " -e " not in setup


def test_cpus_per_task_beyond_any_node_is_refused(tmp_path: Path) -> None:
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "--gpus-per-node", "2", "--cpus-per-task",
                     "99999999999", "-o", tmp_path / "j.sbatch")
    assert result.exit_code == 2 and not (tmp_path / "j.sbatch").exists(), result


def test_launch_does_not_overwrite_a_file_it_did_not_write(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(DEMO, tmp_path / "demo.yaml")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    args = ["launch", "slurm", "demo.yaml", "launch.profile=ddp", "launch.num_processes=2", "--gpus-per-node", "2"]
    assert_paragraph(run_cli(*args, "-o", "notes.txt"), "--out", "already exists", "--force")
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    assert_paragraph(run_cli("launch", "skypilot", "demo.yaml", "launch.profile=ddp", "launch.num_processes=2",
                       "--gpus-per-node", "2", "-o", "notes.txt"), "--out", "already exists")
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    # A launch file grpo wrote is regenerated without --force; any file is replaced with it.
    first = run_cli(*args, "-o", "job.sbatch")
    again = run_cli(*args, "--nodes", "1", "-o", "job.sbatch")
    assert first.exit_code == 0 and again.exit_code == 0, again.output
    forced = run_cli(*args, "-o", "notes.txt", "--force")
    assert forced.exit_code == 0, forced.output
    assert notes.read_text(encoding="utf-8").startswith("#!/bin/bash")


def test_launch_slurm_writes_into_the_run_and_asks_no_gpus_for_the_cpu_demo(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import shlex

    monkeypatch.chdir(tmp_path)
    refused = run_cli("launch", "slurm", DEMO)
    assert_paragraph(refused, "On CPU nodes")
    corrected = " ".join(refused.output.split()).split("Corrected command: ", 1)[1]
    assert corrected.endswith("launch.profile=ddp launch.num_processes=2 --nodes 1 --gpus-per-node 0"), corrected
    result = run_cli(*shlex.split(corrected)[1:])
    assert result.exit_code == 0, result
    script = tmp_path / "outputs" / "demo" / "launch" / "grpo-demo.sbatch"
    text = script.read_text()
    assert "--gpus-per-node" not in "".join(ln for ln in text.splitlines() if ln.startswith("#SBATCH"))
    assert f'#SBATCH --output="{script.parent}/%x-%j.out"' in text
    assert not list(tmp_path.glob("*.sbatch"))
    from grpo_cli.runs import plan_output_dir

    assert not plan_output_dir(script.parent.parent, resume=None, force=False, policy="fail").replace
