"""A real tiny training run with a tool, and `grpo eval` running the same multi-turn loop."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "tools-demo.yaml"
FAST = ["training.max_steps=2", "training.per_device_train_batch_size=16", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]


def test_training_with_a_tool_changes_weights_and_logs_tool_metrics(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    result = train(load_recipe(DEMO, FAST), output_dir=out)
    assert result.status == "completed" and result.global_step == 2
    before = load_file(str(ROOT / "grpo_cli" / "assets" / "tiny-tool" / "model.safetensors"))
    after = load_file(str(out / "model.safetensors"))
    assert [k for k in before if not (before[k] == after[k]).all()], "training left every weight unchanged"
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_logs = [r for r in logs if "reward" in r]
    assert len(train_logs) == 2
    assert all("tools/call_frequency" in r and "tools/failure_frequency" in r for r in train_logs)
    # The pre-trained model calls `add` about half the time: 32 rollouts make a call all but certain.
    assert sum(r["tools/call_frequency"] for r in train_logs) > 0
    stats = json.loads((out / "manifest.json").read_text())["tools"]["add"]
    assert stats["calls"] > 0 and stats["timeouts"] == 0
    report = (out / "report.md").read_text()
    assert "| tools/call_frequency |" in report and "## Tools" in report and "| add |" in report

    # A score explains itself: the reference answer, and each call with its arguments and its result
    answers = {json.loads(line)["question"]: json.loads(line)["answer"]
               for line in (ROOT / "grpo_cli" / "assets" / "tiny-tool-data" / "train.jsonl").read_text().splitlines()}
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    for r in rows:
        assert r["reference"] == {"answer": answers[r["prompt"].removeprefix("user: ")]}
    pairs = [(r["step"], r["prompt"], r["completion"]) for r in rows]
    assert len(pairs) == len(set(pairs)), "a sampled completion is written twice"
    called = [r for r in rows if "tool add:" in r["completion"]]
    assert called, "no sampled rollout called the tool"
    assert all(re.search(r"assistant: .*→ add\(a=\d+, b=\d+\)", r["completion"]) for r in called)
    shown = run_cli("samples", out, "--worst", "-n", "20")
    assert shown.exit_code == 0, shown.output
    assert "reference" in shown.output and "answer:" in shown.output and "add(a=" in shown.output
    assert "| reference |" in report and "answer: " in report


def test_eval_runs_tool_episodes_and_reports_tool_use(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = run_cli("eval", DEMO, "--samples", "6", "-k", "2", "--out", out)
    assert result.exit_code == 0, result
    summary = json.loads((out / "summary.json").read_text())["models"][0]["summary"]
    assert summary["k"] == 2 and summary["prompts"] == 6
    assert "accuracy/mean" in summary
    # the pre-trained model calls `add` about half the time: 12 episodes without a call are ~0.5**12 unlikely
    assert summary["tools/calls_per_episode"] > 0 and 0 <= summary["tools/failure_rate"] <= 1
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    called = [r for r in rows if r["tool_calls"]]
    assert called, "no episode called the tool"
    for row in called:  # a call is followed by its result, then the final answer
        roles = [m["role"] for m in row["messages"]]
        assert roles[:2] == ["assistant", "tool"] and row["messages"][0]["tool_calls"][0]["function"]["name"] == "add"


def test_episode_length_counts_the_model_tokens_not_the_tool_result() -> None:
    """Held-out `mean_length` means what TRL's `completions/mean_length` means: tokens the model wrote."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_cli import load_recipe
    from grpo_cli.tools import load_toolset
    from grpo_cli.tools.episodes import run_episodes, start_episodes, tool_suffix_ids

    recipe = load_recipe(DEMO)
    model_dir = ROOT / "grpo_cli" / "assets" / "tiny-tool"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    toolset = load_toolset(recipe)
    prompts = [[{"role": "user", "content": f"{a}+{b}"}] for a, b in ((402, 441), (798, 703), (339, 290))] * 4
    torch.manual_seed(0)
    episodes = run_episodes(model, tokenizer, toolset, start_episodes(toolset, prompts, [{}] * len(prompts)),
                            max_tokens=64, max_iterations=1, temperature=1.0, top_p=1.0, batch_size=12)
    called = [e for e in episodes if e.tool_calls]
    assert called, "no episode called the tool"
    for e in called:
        results = [m for m in e.completion if m["role"] == "tool"]
        assert e.tool_tokens == len(tool_suffix_ids(tokenizer, results)) > 0
        assert e.model_tokens == len(e.ids) - e.tool_tokens


@pytest.mark.parametrize("recipe", ["tools-demo.yaml", "environment-demo.yaml"])
def test_dynamic_sampling_refills_multi_turn_rollouts(tmp_path: Path, recipe: str) -> None:
    """Each refill round runs TRL's multi-turn loop again (tools called, an environment reset per rollout); the
    joined batch keeps every round's tool mask with its rows."""
    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    overrides = [*FAST, "training.max_steps=3", "sampling.dynamic={max_rounds: 4, metric: reward}"]
    result = train(load_recipe(RECIPES / recipe, overrides), output_dir=out)
    assert result.status == "completed" and result.global_step == 3
    logs = [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
            if "reward" in r]
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0, "nothing dropped: the test proves nothing"
    assert max(r["dynamic_sampling/rounds"] for r in logs) > 1  # refilled
    assert all(r["dynamic_sampling/zero_std_trained"] == 0 for r in logs)
    assert sum(r["tools/call_frequency"] for r in logs) > 0  # multi-turn rollouts, with tool results masked
