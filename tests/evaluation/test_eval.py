"""`grpo eval` on the bundled tiny model: it reproduces what training printed, compares models, and explains errors."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "demo.yaml"
EVAL = ["eval.max_samples=12", "eval.num_generations=4", "eval.temperature=1.0"]
# A few LoRA steps with a learning rate high enough that the adapter visibly changes the samples.
TRAIN = ["training.max_steps=3", "training.per_device_train_batch_size=8", "training.num_generations=4",
         "training.logging_steps=1", "training.learning_rate=5e-2", "model.lora.r=4", "model.lora.alpha=8",
         "model.lora.dropout=0.0", "training.save_strategy=steps", "training.save_steps=2", "output.report_to=none",
         "eval.before_after=true", *EVAL]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    """A finished LoRA run of the demo recipe, with the before/after numbers training printed."""
    from grpo_cli import load_recipe, train

    out = tmp_path_factory.mktemp("eval") / "run"
    result = train(load_recipe(DEMO, TRAIN), output_dir=out)
    assert result.status == "completed" and result.eval_before is not None and result.eval_after is not None
    return result


def _summary(out: Path) -> list[dict]:
    return json.loads((out / "summary.json").read_text())["models"]


def _completions(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]


def _same_scores(printed: dict, measured: dict) -> None:
    for key in ("prompts", "k", "accuracy/mean", "accuracy/std", "pass@1", "pass@4", "mean_length",
                "truncation_rate"):
        assert measured[key] == printed[key], key


def test_eval_reproduces_the_accuracy_training_printed_and_compares_side_by_side(run, tmp_path: Path) -> None:
    before, after = run.eval_before.summary(), run.eval_after.summary()
    assert run.eval_before.completions != run.eval_after.completions, "training did not change the samples"
    out = tmp_path / "cmp"
    result = run_cli("eval", DEMO, *EVAL, "--compare", run.output_dir, "--out", out)
    assert result.exit_code == 0, result.output
    base, trained = _summary(out)
    _same_scores(before, base["summary"])
    _same_scores(after, trained["summary"])
    # The table: both models, their accuracy and the change between them.
    assert "tiny-arith" in result.output and run.output_dir.name in result.output and "Δ" in result.output
    assert f"{before['pass@1']:.4f}" in result.output and f"{after['pass@1']:.4f}" in result.output
    assert f"{after['pass@1'] - before['pass@1']:+.4f}" in result.output
    # The run is the recipe's own output dir and already compared: no note telling the user to compare it
    here = run_cli("eval", DEMO, *EVAL, f"output.dir={run.output_dir}", "--compare", run.output_dir,
                   "--out", tmp_path / "here")
    assert here.exit_code == 0 and "--compare" not in here.output and "base model" not in here.output
    alone = run_cli("eval", DEMO, *EVAL, f"output.dir={run.output_dir}", "--out", tmp_path / "alone")
    assert f"--compare {run.output_dir}" in " ".join(alone.output.split())  # without it, the note helps
    rows = _completions(out)
    by_model = {m: [r["prompt"] for r in rows if r["model"] == m] for m in (base["label"], trained["label"])}
    assert by_model[base["label"]] == by_model[trained["label"]] and len(by_model[base["label"]]) == 12 * 4
    assert {"completion", "rewards", "length", "truncated", "answer"} <= set(rows[0])


def test_adapter_flag_and_checkpoint_dir_load_the_trained_adapter(run, tmp_path: Path) -> None:
    out = tmp_path / "adapter"
    result = run_cli("eval", DEMO, *EVAL, "--adapter", run.output_dir, "--compare", run.output_dir / "checkpoint-2",
                     "--out", out)
    assert result.exit_code == 0, result.output
    adapter, ckpt = _summary(out)
    _same_scores(run.eval_after.summary(), adapter["summary"])
    assert "checkpoint (step 2), adapter over base" in ckpt["source"]
    assert ckpt["label"] == f"{run.output_dir.name}/checkpoint-2"


def test_pass_at_k_matches_a_hand_computation(tmp_path: Path) -> None:
    from grpo_cli.evaluation import EvalResult

    # 3 prompts x 4 samples with 1, 2 and 0 correct answers.
    scores = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    r = EvalResult("m", 3, 4, {"accuracy": scores}, primary="accuracy")
    assert r.pass_at(1) == pytest.approx((1 / 4 + 2 / 4 + 0) / 3)
    # pass@2 = 1 - C(n-c, 2) / C(n, 2): 1 - 3/6, 1 - 1/6, 0
    assert r.pass_at(2) == pytest.approx((0.5 + 5 / 6 + 0) / 3)
    assert r.pass_at(4) == pytest.approx(2 / 3)

    out = tmp_path / "k"
    result = run_cli("eval", DEMO, "--samples", "10", "-k", "6", "--out", out)
    assert result.exit_code == 0, result.output
    summary = _summary(out)[0]["summary"]
    groups: dict[int, list[float]] = {}
    for row in _completions(out):
        groups.setdefault(row["prompt_index"], []).append(row["rewards"]["accuracy"])
    assert len(groups) == 10 and all(len(g) == 6 for g in groups.values())
    hand = {k: sum(1 - math.comb(6 - int(sum(g)), k) / math.comb(6, k) for g in groups.values()) / 10 for k in (1, 6)}
    assert summary["pass@1"] == pytest.approx(hand[1]) and summary["pass@6"] == pytest.approx(hand[6])
    assert summary["accuracy/rate"] == pytest.approx(sum(map(sum, groups.values())) / 60)


def test_file_and_split_choose_the_prompts(tmp_path: Path) -> None:
    data = tmp_path / "extra.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "answer": a}) for q, a in
                              [("1+1", "2"), ("2+2", "4"), ("3+3", "6")]) + "\n")
    out = tmp_path / "file"
    result = run_cli("eval", DEMO, "--file", data, "-k", "2", "--temperature", "0", "--out", out)
    assert result.exit_code == 0, result.output
    rows = _completions(out)
    assert [r["prompt"] for r in rows] == ["1+1=", "1+1=", "2+2=", "2+2=", "3+3=", "3+3="]
    assert rows[0]["completion"] == rows[1]["completion"]  # greedy: both samples agree
    out = tmp_path / "split"
    result = run_cli("eval", DEMO, "--split", "train", "-n", "5", "-k", "1", "--out", out)
    assert result.exit_code == 0, result.output
    assert _summary(out)[0]["summary"]["prompts"] == 5


@pytest.mark.parametrize(("args", "expected"), [
    (["data.eval_split=null"], "no eval split"),
    (["--split", "test", "--file", "x.jsonl"], "not both"),
    (["--split", "validation"], "Splits of this recipe: train, test"),
    (["--file", "missing.jsonl"], "not found"),
    (["--model", "./no/such/model"], "model ./no/such/model not found"),
    (["--adapter", str(RECIPES)], "holds no LoRA adapter"),
    (["--backend", "tpu"], "unknown backend"),
])
def test_eval_errors_are_one_paragraph_with_exit_2(args: list[str], expected: str) -> None:
    result = run_cli("eval", DEMO, *args)
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output


def test_model_sources_are_classified_without_loading(tmp_path: Path, run) -> None:
    from grpo_cli.errors import GrpoError
    from grpo_cli.models.sources import resolve_model_source

    assert resolve_model_source("Qwen/Qwen2.5-0.5B-Instruct").kind == "hub"
    full = resolve_model_source("bundled:tiny-arith")
    assert full.kind == "model" and full.adapter is None
    assert full.describe() == "bundled:tiny-arith (bundled with grpo)"  # what eval's console line says
    lora = resolve_model_source(str(run.output_dir))
    assert lora.kind == "run" and lora.adapter == run.output_dir and Path(lora.weights) == Path(full.weights)
    # The console names the base as the run did (a reference), not the directory it resolved to.
    assert lora.describe().endswith("adapter over base bundled:tiny-arith)"), lora.describe()
    # An adapter whose saved base path no longer exists: the run's recipe still names it.
    moved = tmp_path / "moved"
    shutil.copytree(run.output_dir, moved)
    for cfg in (moved / "adapter_config.json", moved / "checkpoint-2" / "adapter_config.json"):
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "base_model_name_or_path": "/gone/tiny-arith"}))
    ckpt = resolve_model_source(str(moved / "checkpoint-2"))
    assert ckpt.kind == "checkpoint" and ckpt.step == 2 and Path(ckpt.weights) == Path(full.weights)
    # A bare adapter (no run around it) with a missing base asks for --base.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(moved / "adapter_config.json", bare)
    with pytest.raises(GrpoError, match="--base"):
        resolve_model_source(str(bare))
    assert resolve_model_source(str(bare), base="bundled:tiny-arith").weights == full.weights


def test_vllm_engine_is_used_when_installed_with_a_gpu(run, monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: a stand-in `vllm` module records what grpo asks of the offline engine."""
    import importlib.machinery
    import types

    import torch

    from grpo_cli import load_recipe
    from grpo_cli.evaluation import EvalSettings, EvalTask, evaluate_models
    from grpo_cli.models.sources import resolve_model_source

    calls: dict = {}

    class LLM:
        def __init__(self, **kwargs: object) -> None:
            calls["llm"] = kwargs

        def generate(self, inputs: list, params: object, lora_request: object = None, use_tqdm: bool = True) -> list:
            calls.update(inputs=inputs, params=params, lora=lora_request)
            choice = types.SimpleNamespace(text="4", token_ids=[15, 2], finish_reason="stop")
            return [types.SimpleNamespace(outputs=[choice] * params.n) for _ in inputs]

    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM, vllm.SamplingParams = LLM, lambda **kw: types.SimpleNamespace(**kw)
    lora_mod = types.ModuleType("vllm.lora.request")
    lora_mod.LoRARequest = lambda name, idx, path: ("lora", path)
    for name, mod in (("vllm", vllm), ("vllm.lora", types.ModuleType("vllm.lora")), ("vllm.lora.request", lora_mod)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

    recipe = load_recipe(DEMO, ["launch.profile=single"])
    settings = EvalSettings.resolve(recipe, limit=3, k=2, temperature=0.0)
    [result] = evaluate_models(EvalTask(settings, recipe=recipe), [resolve_model_source(str(run.output_dir))])
    assert calls["llm"]["enable_lora"] is True and calls["llm"]["max_lora_rank"] == 8
    assert calls["lora"] == ("lora", str(run.output_dir))
    assert calls["params"].n == 1 and calls["params"].temperature == 0.0  # greedy: one sample, repeated k times
    assert len(calls["inputs"]) == 3 and all("prompt_token_ids" in i for i in calls["inputs"])
    assert result.completions == ["4"] * 6 and result.truncated == [False] * 6


def test_an_earlier_evaluation_is_kept_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    args = ["eval", DEMO, "-n", "2", "-k", "1", "--out", out]
    assert run_cli(*args).exit_code == 0
    before = (out / "summary.json").read_text()
    again = run_cli(*args, "--temperature", "0")
    assert again.exit_code == 2 and "--force" in again.output and "Traceback" not in again.output, again.output
    assert (out / "summary.json").read_text() == before
    forced = run_cli(*args, "--temperature", "0", "--force")
    assert forced.exit_code == 0, forced.output
    assert json.loads((out / "summary.json").read_text())["settings"]["temperature"] == 0
