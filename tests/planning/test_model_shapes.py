"""The shipped shape table: numbers that add up to the published sizes, and a memory plan before any download."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_cli.planning.memory import find_model_config, memory_plan
from grpo_cli.planning.model_config import shipped_entries, shipped_model_ids, shipped_shape
from grpo_cli.planning.shapes import ModelShape
from grpo_cli.recipe import load_recipe
from tests.conftest import MINIMAL, RECIPES, run_cli

FAMILIES = ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-32B",
            "Qwen/Qwen2.5-VL-7B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.3-70B-Instruct",
            "google/gemma-2-9b-it", "google/gemma-3-27b-it", "mistralai/Mistral-7B-Instruct-v0.3",
            "microsoft/Phi-3-mini-4k-instruct", "microsoft/Phi-4-mini-instruct",
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"]


def _published(text: str) -> tuple[float, float]:
    """'7.61B' -> (7.61e9, half a unit of its last digit); '135M' -> (1.35e8, 5e5)."""
    unit = {"B": 1e9, "M": 1e6}[text[-1]]
    number = text[:-1]
    decimals = len(number.partition(".")[2])
    return float(number) * unit, 0.5 * 10 ** -decimals * unit


@pytest.mark.parametrize("entry", shipped_entries(), ids=lambda e: e["ids"][0])
def test_each_entry_adds_up_to_its_published_parameter_count(entry: dict) -> None:
    config, source = shipped_shape(entry["ids"][0])
    assert entry["source"].endswith("config.json") or "config.json (" in entry["source"]
    params = ModelShape.from_config(config).params
    published, rounding = _published(entry["published_params"])
    # model cards round (Qwen2.5-14B's says 14.7B for 14.77B): half a unit of the last digit plus 0.5 %
    assert abs(params - published) <= rounding + 0.005 * published, (params, entry["published_params"])


def test_the_families_the_issue_names_are_known_case_insensitively() -> None:
    for ref in FAMILIES:
        assert shipped_shape(ref) is not None, ref
        assert shipped_shape(ref.lower()) is not None
    assert len(set(shipped_model_ids())) == len(shipped_model_ids())  # an id in two entries would be ambiguous
    assert shipped_shape("someone/unknown-7b") is None


def test_validate_plans_gsm8k_from_the_shipped_table_without_a_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    result = run_cli("validate", RECIPES / "gsm8k.yaml", "--json")
    assert result.exit_code == 0, result
    line = json.loads(result.output[result.output.index("{"):])["plan"]["memory per GPU"]
    assert line.startswith("~") and "GiB" in line and "shipped shape table" in line
    assert "Qwen/Qwen2.5-0.5B" in line


def test_a_cached_config_wins_over_the_table(monkeypatch, tmp_path: Path, write_recipe, minimal_dir) -> None:
    cache = tmp_path / "hub"
    snap = cache / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (cache / "models--Qwen--Qwen2.5-0.5B-Instruct" / "refs").mkdir()
    (cache / "models--Qwen--Qwen2.5-0.5B-Instruct" / "refs" / "main").write_text("abc")
    config, _ = shipped_shape("Qwen/Qwen2.5-0.5B-Instruct")
    (snap / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    found, source = find_model_config(load_recipe(write_recipe(MINIMAL)))
    assert found["num_hidden_layers"] == 2 and source.startswith("hub cache")


def test_a_model_shape_block_plans_an_unknown_model(monkeypatch, tmp_path: Path, write_recipe, minimal_dir) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    text = MINIMAL.replace("Qwen/Qwen2.5-0.5B-Instruct", "acme/private-1b") + """launch: {profile: single}
"""
    path = write_recipe(text)
    plan, why = memory_plan(load_recipe(path), gpu_memory_gb=None, world_size=1)
    assert plan is None and "model.shape" in why
    shape = ("model.shape={hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24, num_attention_heads: 14,"
             " num_key_value_heads: 2, vocab_size: 151936, tie_word_embeddings: true, model_type: qwen2}")
    plan, _ = memory_plan(load_recipe(path, [shape]), gpu_memory_gb=None, world_size=1)
    assert plan is not None and plan.params == 494_032_768 and plan.source == "the recipe's model.shape"
    result = run_cli("validate", path, shape)
    assert result.exit_code == 0 and "model.shape" in result.output.replace("\n", ""), result


@pytest.mark.parametrize(("ref", "expected"), [
    ("Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen2.5-Coder-7B-Instruct"),
    ("Qwen/Qwen2-7B", "Qwen2-7B"),
    ("unsloth/Qwen2.5-7B-Instruct", "unsloth's mirror of Qwen/Qwen2.5-7B"),
    ("unsloth/Qwen3-8B-unsloth-bnb-4bit", "unsloth's mirror of Qwen/Qwen3-8B"),
])
def test_shapes_for_the_models_public_grpo_configs_name(ref: str, expected: str) -> None:
    found = shipped_shape(ref)
    assert found is not None and expected in found[1], found
    assert found[0]["hidden_size"] > 0
    assert shipped_shape("unsloth/not-a-model-we-know") is None
