"""vLLM on CPU as a server (`grpo vllm-serve`): training against it with grpo's CPU weight sync, the server sampling
with the new weights after a sync, async mode (TRL's async trainer, Ctrl-C, resume, health guards), stopping a
loaded server, dynamic sampling through it, and the smoke run of benchmarks/experiments/async_vs_sync.py (here, not in
tests/measuring/test_benchmarks.py, so that it trains against this module's server instead of starting its own).
One server serves the whole module.

These need vLLM itself (see tests/vllm/test_vllm_colocate.py). Colocate mode is tests/vllm/test_vllm_colocate.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli, sigint_as_a_terminal
from tests.vllm.shared import DEMO, ENV, VLLM, dynamic_through_vllm

pytestmark = VLLM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A real `grpo vllm-serve` for the demo (server mode), stopped with its whole process group afterwards."""
    from grpo_cli.launching.vllm_server import wait_for_server

    port = _free_port()
    overrides = ["launch.vllm.mode=server", f"launch.vllm.port={port}", "launch.vllm.server_timeout=600"]
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "grpo_cli", "vllm-serve", str(DEMO), *overrides], env=ENV,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_server(f"http://127.0.0.1:{port}", 600, alive=lambda: proc.poll() is None)
        yield overrides, f"http://127.0.0.1:{port}"
    finally:
        from grpo_cli.launching.vllm_server import stop_server

        stop_server(proc)
        log.close()


def test_train_against_a_real_server_completes_with_cpu_weight_sync(server, tmp_path: Path) -> None:
    overrides, _ = server
    out = tmp_path / "run"
    result = run_cli("train", DEMO, *overrides, "training.max_steps=6", "training.logging_steps=1",
                     "eval.before_after=false", "-o", out)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "sampling/sampling_logp_difference/max" in r]
    assert len(steps) == 6
    # Float32 on both sides: after each sync the server's log-probs are the trainer's (up to summation order).
    assert all(r["sampling/sampling_logp_difference/max"] < 1e-3 for r in steps), steps


def test_after_a_sync_the_server_samples_with_the_new_weights(server) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_cli.paths import ASSETS_DIR
    from grpo_cli.training.vllm_cpu import client_class

    _, url = server
    client = client_class()(base_url=url, connection_timeout=60)
    client.init_communicator(device="cpu")  # asks the server's receiver, which answers
    assert client.cpu_sync
    model = AutoModelForCausalLM.from_pretrained(ASSETS_DIR / "tiny-arith", dtype=torch.float32)
    seqs = [[1, *map(ord, q), 2] for q in ("3+4=7", "12+9=21", "0+0=0")]

    def served() -> list[list[float]]:
        got = client.get_sequence_logprobs(seqs, [1] * len(seqs), top_logprobs=1)["actual_logprobs"]
        return [[t[0] for t in s] for s in got]

    def local() -> list[list[float]]:
        out = []
        for seq in seqs:
            ids = torch.tensor([seq])
            with torch.no_grad():
                logp = model(ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
            out.append(logp.tolist())
        return out

    def gap(a: list[list[float]], b: list[list[float]]) -> float:
        return max(abs(x - y) for sa, sb in zip(a, b, strict=True) for x, y in zip(sa, sb, strict=True))

    client.update_model_params(model)  # the bundled weights, as the server loaded them
    client.reset_prefix_cache()
    original = served()
    assert gap(original, local()) < 1e-3
    with torch.no_grad():  # new weights: every parameter moved
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    client.update_model_params(model)
    client.reset_prefix_cache()
    after = served()
    assert gap(after, local()) < 1e-3  # the server now computes with exactly the new weights
    assert gap(after, original) > 0.1  # and they are not the old ones
    client.update_model_params(AutoModelForCausalLM.from_pretrained(ASSETS_DIR / "tiny-arith", dtype=torch.float32))


def test_async_mode_trains_the_demo_with_trls_async_trainer_and_the_server_gets_every_sync(server,
                                                                                         tmp_path: Path) -> None:
    """`launch.vllm.mode: async`: TRL's AsyncGRPOTrainer on the CPU (grpo's weight sync and tree attention)."""
    import torch
    from safetensors.torch import load_file

    from grpo_cli.paths import ASSETS_DIR
    from grpo_cli.training.async_cpu import CpuWeightTransfer
    from grpo_cli.training.vllm_cpu import rpc

    overrides, url = server
    out = tmp_path / "async"
    result = run_cli("train", DEMO, *overrides, "launch.vllm.mode=async", "training.max_steps=4",
                     "training.logging_steps=1", "eval.before_after=false", "-o", out)
    assert result.exit_code == 0, result.output
    assert "AsyncGRPOTrainer" in result.output and "at most 1 weight sync(s)" in " ".join(result.output.split())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["async"]["max_staleness"] == 1
    steps = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if "sample/staleness_max" in r]
    assert len(steps) == 4
    assert all(r["sample/staleness_max"] <= 1 and "ratio" in r and r["perf/weight_sync_s"] > 0 for r in steps)
    # Some of a later step's completions were sampled while the step before it trained: generation overlapped.
    assert any(r["sample/staleness_max"] == 1 for r in steps[1:]), steps
    trained = load_file(out / "model.safetensors")
    bundled = load_file(ASSETS_DIR / "tiny-arith" / "model.safetensors")
    assert sum(not torch.equal(trained[n], bundled[n]) for n in bundled) >= len(bundled) // 2
    names = ["model.embed_tokens.weight", "model.norm.weight", "model.layers.1.post_attention_layernorm.weight"]
    served = rpc(CpuWeightTransfer(url)._post, url, "grpo_weight_digest", ",".join(names))[0]
    for name in names:  # the server samples with the weights of the last step, not the bundled ones
        assert served[name] == pytest.approx(trained[name].flatten()[:8].tolist(), abs=1e-6), name
        assert served[name] != pytest.approx(bundled[name].flatten()[:8].tolist(), abs=1e-6), name


def _live_in_group(pgid: int) -> list[str]:
    """The processes of a process group that still run (zombies waiting for init to reap them do not count)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(text.split(")", 1)[0] + ")")
    return live


def test_async_mode_stops_on_ctrl_c_resumes_reports_and_obeys_health_guards(server, tmp_path: Path) -> None:
    """Async mode as the synchronous trainer: Ctrl-C (SIGINT to the whole process group, as a terminal sends it)
    saves a checkpoint and exits 130 with no process left behind; `--resume` continues from it; the report shows
    the async metrics; a health guard with `action: stop` ends the run with exit code 3."""
    overrides, _ = server
    out = tmp_path / "async"
    base = [sys.executable, "-m", "grpo_cli", "train", str(DEMO), *overrides, "launch.vllm.mode=async",
            "training.max_steps=5", "training.logging_steps=1", "eval.before_after=false", "-o", str(out)]
    proc = subprocess.Popen(base, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=sigint_as_a_terminal)
    metrics = out / "metrics.jsonl"
    while proc.poll() is None and not (metrics.is_file() and "sample/staleness_max" in metrics.read_text()):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # the trainer, TRL's rollout child and everything else in the group
    sent = time.monotonic()
    try:
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:  # hung (before grpo blocked SIGINT in TRL's child, it did): leave nothing behind
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output
    assert time.monotonic() - sent < 30, output  # the step in flight, a checkpoint, the report (6-8 s unloaded)
    assert "Child did not exit" not in output and "Rollout worker child has failed" not in output, output
    deadline = time.monotonic() + 5
    while _live_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _live_in_group(proc.pid) == []
    manifest = json.loads((out / "manifest.json").read_text())
    step = manifest["global_step"]
    assert manifest["status"] == "interrupted" and 1 <= step < 5, manifest
    assert (out / f"checkpoint-{step}" / "rollout_state.json").is_file()

    result = run_cli("train", DEMO, *overrides, "launch.vllm.mode=async", "training.max_steps=5",
                     "training.logging_steps=1", "eval.before_after=false", "-o", out, "--resume")
    assert result.exit_code == 0, result.output
    assert f"resuming from checkpoint-{step} (step {step})" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["global_step"] == 5
    logged = [r["step"] for r in map(json.loads, metrics.read_text().splitlines()) if "sample/staleness_max" in r]
    assert logged == [1, 2, 3, 4, 5]  # the resumed run went on from the checkpoint's step
    report = (out / "report.md").read_text()
    assert (out / "report.png").stat().st_size > 0 and "| sample/staleness_max |" in report
    assert "| perf/rollout_wait_s |" in report

    stopped = tmp_path / "guarded"
    result = run_cli("train", DEMO, *overrides, "launch.vllm.mode=async", "training.max_steps=5",
                     "training.logging_steps=1", "eval.before_after=false", "health.entropy.threshold=10",
                     "health.entropy.window=2", "health.entropy.action=stop", "-o", stopped)
    assert result.exit_code == 3, result.output
    assert "health stop entropy at step 2" in " ".join(result.output.split())
    assert json.loads((stopped / "manifest.json").read_text())["status"] == "stopped"
    assert (stopped / "checkpoint-2" / "trainer_state.json").is_file()
    assert "**entropy** (stop)" in (stopped / "report.md").read_text()


def test_stop_server_ends_a_loaded_server_and_its_engine_process() -> None:
    """`stop_server` takes the whole process group down, also while the engine is still starting."""
    from grpo_cli.launching.vllm_server import stop_server

    proc = subprocess.Popen([sys.executable, "-m", "grpo_cli", "vllm-serve", str(DEMO), "launch.vllm.mode=server",
                             f"launch.vllm.port={_free_port()}"], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(15)  # mid start-up: the API server has spawned its engine core
    pgid = os.getpgid(proc.pid)
    stop_server(proc)
    assert proc.poll() is not None
    time.sleep(1)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # no process of the group is left



@pytest.mark.parametrize("oversample", [False, True], ids=["refill", "oversample"])
def test_dynamic_sampling_generates_every_round_through_a_vllm_server(server, tmp_path: Path, oversample: bool) -> None:
    overrides, _ = server
    _, logs = dynamic_through_vllm(tmp_path, *overrides, oversample=oversample)
    # float32 on both sides: after each sync the server's log-probs are the trainer's, refilled rows included
    assert all(r["sampling/sampling_logp_difference/max"] < 1e-3 for r in logs), logs


def test_the_async_vs_sync_benchmark_prints_both_trainers(server) -> None:
    from tests.measuring.test_benchmarks import labels, run_script, table

    _, url = server
    out = run_script("experiments/async_vs_sync.py", "--steps", "2", "--pairs", "1", "--port", url.rsplit(":", 1)[1])
    assert labels(table(out, "trainer (launch.vllm.mode)")) == ["GRPOTrainer (server)", "AsyncGRPOTrainer (async)"]
