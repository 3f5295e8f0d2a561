"""A real Slurm: a one-node cluster on localhost runs the script `grpo launch slurm` writes for the demo.

The fixture starts MUNGE, slurmctld and slurmd with private sockets, ports and state under tmp_path (nothing
in /etc is touched) and stops them afterwards. The script asks for 2 nodes x 1 task; on this one node the
job is submitted as 2 tasks, which the script runs as 2 machines (machine rank = SLURM_PROCID), exactly as
it would on two nodes. Needs root and Slurm/MUNGE (`scripts/install_slurm.sh`, which .ci/run calls).
`_cluster(..., nodes=[...])` gives several node entries on this host instead, one slurmd each
(tests/launching/test_slurm_vllm.py runs a heterogeneous job on three).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

DAEMONS = ("slurmctld", "slurmd", "munged")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(d: Path, nodes: list[str]) -> str:
    """One node: this host under its own name. Several: one slurmd each on this host, on ports of their own."""
    host = socket.gethostname()
    if nodes == [host]:
        entries = f"NodeName={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 State=UNKNOWN\n"
    else:
        entries = "".join(f"NodeName={n} NodeHostname={host} NodeAddr={n} Port={_free_port()} CPUs=2 RealMemory=2000 "
                          "State=UNKNOWN\n" for n in nodes)
    return f"""ClusterName=grpotest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=bf_interval=1
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
{entries}PartitionName=debug Nodes={",".join(nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


@pytest.fixture
def slurm_cluster(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """A private one-node cluster (2 CPUs); yields its slurm.conf, stops every daemon it started."""
    with _cluster(tmp_path, monkeypatch) as conf:
        yield conf


@contextlib.contextmanager
def _cluster(tmp_path: Path, monkeypatch, nodes: list[str] | None = None) -> Iterator[Path]:
    """Start the private cluster; `nodes` names several nodes on this host (one slurmd each, `slurmd -N`)."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if os.geteuid() != 0:
        pytest.skip("starts slurmctld/slurmd/munged, which needs root; run the tests as root")
    if missing:
        pytest.skip(f"Slurm/MUNGE not installed (missing: {', '.join(missing)}); run scripts/install_slurm.sh")
    nodes = nodes or [socket.gethostname()]
    d = tmp_path / "slurm"
    (d / "state").mkdir(parents=True)
    for node in nodes:
        (d / "spool" / node).mkdir(parents=True)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, nodes))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    try:
        subprocess.run(["munged", "-f", f"--socket={d}/munge.sock", f"--key-file={key}", f"--log-file={d}/munged.log",
                        f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed"], check=True, timeout=30)
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, timeout=30)
        for node in nodes:
            subprocess.run(["slurmd", "-f", str(conf), "-N", node], check=True, timeout=30)
        deadline = time.monotonic() + 60
        while subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True).stdout.split() != \
                ["idle"]:
            assert time.monotonic() < deadline, (d / "slurmctld.log").read_text()[-2000:]
            time.sleep(1)
        yield conf
    finally:
        _drain_queue()
        for node in nodes:  # slurmd and slurmctld before munged, which they authenticate with
            _stop(d / f"slurmd-{node}.pid")
        _stop(d / "slurmctld.pid")
        _stop(d / "munged.pid")


def _drain_queue(timeout: float = 60) -> None:
    """Cancel what is left and wait until the queue is empty, so no job step outlives the daemons."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=30).stdout.split()
        if not jobs:
            return
        subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)
        time.sleep(1)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _stop(pid_file: Path, timeout: float = 30) -> None:
    """SIGTERM the daemon, wait for it to exit, SIGKILL it after `timeout` seconds."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.1)


def test_the_private_cluster_leaves_no_daemon_behind(tmp_path: Path, monkeypatch) -> None:
    with _cluster(tmp_path, monkeypatch):
        files = {"slurmctld": "slurmctld", "slurmd": f"slurmd-{socket.gethostname()}", "munged": "munged"}
        pids = {name: int((tmp_path / "slurm" / f"{file}.pid").read_text().split()[0])
                for name, file in files.items()}
        assert all(_alive(pid) for pid in pids.values())
    assert not [name for name, pid in pids.items() if _alive(pid)]  # gone when the fixture returns


def _wait(job: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
        # A heterogeneous job shows one JobState per component: done when every component is.
        states = [w.split("=", 1)[1] for w in info.split() if w.startswith("JobState=")]
        active = [s for s in states if s in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]
        if states and not active:
            return info
        state = "/".join(active) or "unknown"
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job])
            pytest.fail(f"job {job} still {state} after {timeout}s")
        time.sleep(2)


def test_generated_sbatch_script_trains_the_demo_on_two_slurm_tasks(slurm_cluster: Path, tmp_path: Path,
                                                                     monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    venv = Path(sys.executable).parent.parent
    result = run_cli("launch", "slurm", RECIPES / "demo.yaml", "launch.profile=ddp", "launch.num_processes=2",
                     f"launch.main_process_port={_free_port()}", "training.max_steps=2",
                     "training.per_device_train_batch_size=16", "training.num_generations=4",
                     "training.logging_steps=1", "eval.before_after=false", f"output.dir={out}",
                     "--nodes", "2", "--gpus-per-node", "0", "--time", "00:15:00", "-o", "job.sbatch",
                     "--setup", f"source {venv}/bin/activate; export OMP_NUM_THREADS=1")
    assert result.exit_code == 0, result
    # One node acting as two: the same script, given 2 tasks on 1 node instead of 1 task on each of 2 nodes.
    sub = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2", "job.sbatch"],
                         capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    info = _wait(job, timeout=600)
    log = next(tmp_path.glob(f"*-{job}.out")).read_text()
    assert "JobState=COMPLETED" in info and "ExitCode=0:0" in info, log[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["distributed"]["world_size"] == 2
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if '"reward"' in line]
    assert steps == [1, 2]  # both tasks trained each step together; the main one wrote it once
    assert log.count("completed at step 2") == 1 and (out / "model.safetensors").exists()
