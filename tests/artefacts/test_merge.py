"""`grpo merge` folds a trained LoRA into the bundled tiny model and the result needs no peft to reproduce it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "demo.yaml"
TRAIN = ["training.max_steps=3", "training.per_device_train_batch_size=8", "training.num_generations=4",
         "training.logging_steps=1", "training.learning_rate=5e-2", "model.lora.r=4", "model.lora.alpha=8",
         "model.lora.dropout=0.0", "training.save_strategy=steps", "training.save_steps=2", "output.report_to=none",
         "eval.before_after=false"]
PROBE = [[5, 6, 7, 8, 9, 10, 11, 12], [40, 41, 42, 43, 44, 45, 46, 47]]

# Load the merged dir in a fresh interpreter where peft cannot be imported at all.
PLAIN = textwrap.dedent("""
    import sys
    sys.modules["peft"] = None  # any `import peft` now fails
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor(PROBE)).logits
    torch.save(logits, sys.argv[2])
    print(type(model).__name__)
""").replace("PROBE", repr(PROBE))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished LoRA run of the demo recipe (adapter + checkpoint-2)."""
    from grpo_cli import load_recipe, train

    out = tmp_path_factory.mktemp("merge") / "run"
    assert train(load_recipe(DEMO, TRAIN), output_dir=out).status == "completed"
    return out


def _logits(model_dir: str, adapter: Path | None = None):  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    with torch.inference_mode():
        return model(input_ids=torch.tensor(PROBE)).logits


def _base(run: Path) -> str:
    return json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"]


def test_merged_model_loads_without_peft_and_matches_base_plus_adapter(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "merged"
    result = run_cli("merge", run, "--out", out)
    assert result.exit_code == 0, result.output
    assert "largest logit difference" in result.output and "merged" in result.output
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    assert not names & {"adapter_config.json", "adapter_model.safetensors"}
    assert not list(tmp_path.glob(".merged*")), "temporary directory left behind"
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")  # the merged model's card: a full model, made by this run
    assert card.data.library_name == "transformers" and {"grpo", "trl"} <= set(card.data.tags)
    assert "| accuracy | 1.0 |" in card.text and "lora:" in card.text and "report.png" in names
    run_card = ModelCard.load(run / "README.md")  # the run's own card: a LoRA adapter
    assert run_card.data.library_name == "peft" and "lora" in run_card.data.tags

    saved = tmp_path / "logits.pt"
    proc = subprocess.run([sys.executable, "-c", PLAIN, str(out), str(saved)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Qwen2ForCausalLM"
    import torch

    merged = torch.load(saved)
    expected = _logits(_base(run), run)
    assert torch.allclose(merged, expected, atol=1e-4, rtol=0)
    assert not torch.allclose(merged, _logits(_base(run)), atol=1e-3), "the adapter changed nothing"


def test_checkpoint_merges_to_sharded_bfloat16(run: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from grpo_cli.artefacts.merge import merge_adapter

    out = tmp_path / "bf16"
    result = merge_adapter(str(run / "checkpoint-2"), out, dtype="bfloat16", max_shard_size="200KB")
    assert result.dtype == "bfloat16" and 0 <= result.max_diff <= result.tolerance
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2
    model = AutoModelForCausalLM.from_pretrained(out, dtype="auto")
    assert str(model.dtype) == "torch.bfloat16"


def test_refuses_non_empty_out_unless_forced(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    result = run_cli("merge", run, "--out", out)
    assert result.exit_code == 2 and "not empty" in result.output and "--force" in result.output
    assert (out / "keep.txt").read_text() == "precious"
    earlier = tmp_path / "earlier"
    assert run_cli("merge", run, "--out", earlier).exit_code == 0
    (earlier / "stale.txt").write_text("from the earlier merge")
    result = run_cli("merge", run, "--out", earlier)
    assert result.exit_code == 2 and "not empty" in result.output
    result = run_cli("merge", run, "--out", earlier, "--force")
    assert result.exit_code == 0, result.output
    assert not (earlier / "stale.txt").exists() and (earlier / "model.safetensors").exists()


def test_interrupted_or_failed_merge_leaves_nothing(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grpo_cli.artefacts.merge as merging

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(merging, "_max_diff", interrupted)
    with pytest.raises(KeyboardInterrupt):
        merging.merge_adapter(str(run), tmp_path / "half")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()

    fold = merging._fold

    def broken_fold(model):  # type: ignore[no-untyped-def]
        merged = fold(model)
        merged.model.layers[0].mlp.down_proj.weight.data += 0.5  # a merge that went wrong
        return merged

    monkeypatch.setattr(merging, "_fold", broken_fold)
    result = run_cli("merge", run, "--out", tmp_path / "bad")
    assert result.exit_code == 1 and "verification failed" in result.output and "nothing was written" in result.output
    assert list(tmp_path.iterdir()) == []


def _copy_model(src: str, dst: Path, **config: object) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **config}))
    return dst


def test_merge_errors_say_how_to_proceed(run: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    out = ["--out", str(tmp_path / "out")]
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [([empty], "no LoRA adapter"), ([_base(run)], "nothing to merge")]
    # A base of another shape, and one with fewer layers (peft would load it silently, half-applied).
    for name, change in (("narrow", {"hidden_size": 32, "intermediate_size": 96}),
                         ("shallow", {"num_hidden_layers": 1, "layer_types": ["full_attention"]})):
        config = AutoConfig.from_pretrained(_base(run))
        for key, value in change.items():
            setattr(config, key, value)
        AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / name)
        cases.append(([run, "--base", tmp_path / name], "does not fit the base model"))
    quantized = _copy_model(_base(run), tmp_path / "q4", quantization_config={"quant_method": "bitsandbytes",
                                                                             "load_in_4bit": True})
    cases.append(([run, "--base", quantized], "quantized (bitsandbytes 4bit)"))
    bare = tmp_path / "bare"
    shutil.copytree(run / "checkpoint-2", bare)
    cfg = json.loads((bare / "adapter_config.json").read_text())
    (bare / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": "/gone/tiny"}))
    cases.append(([bare], "--base ID|DIR"))
    for args, expected in cases:
        result = run_cli("merge", *args, *out)
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.output and "Traceback" not in result.output, (args, result.output)
    assert not (tmp_path / "out").exists()
    # The explicit --base fixes the moved adapter.
    result = run_cli("merge", bare, "--base", _base(run), *out)
    assert result.exit_code == 0, result.output


def test_force_refuses_a_directory_that_is_not_a_model(run: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("not a model")
    result = run_cli("merge", run, "--out", home, "--force")
    assert result.exit_code == 2 and "does not look like a model" in result.output, result.output
    assert (home / "notes.txt").read_text() == "not a model"


def test_a_killed_merge_leaves_nothing_that_later_merges_keep(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "merged"
    cmd = [sys.executable, "-m", "grpo_cli", "merge", str(run), "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not list(tmp_path.glob(".merged.tmp-*")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.kill()  # SIGKILL: no cleanup handler runs
    proc.wait()
    if out.exists():
        pytest.skip("the merge finished before it could be killed")
    stale = list(tmp_path.glob(".merged.tmp-*"))
    assert stale, "the killed merge left no temporary directory to clean"
    result = run_cli("merge", run, "--out", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged"]
