"""Vision-language GRPO on the bundled tiny LLaVA: LoRA on the language model, merge with the processor, eval,
freezing the vision tower, and check-rewards on image rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_cli.recipe.loader import load_recipe
from tests.conftest import RECIPES, ROOT, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "vlm-demo.yaml"
BASE = ROOT / "grpo_cli" / "assets" / "tiny-vlm"
SMALL = ["data.max_samples=16", "data.max_eval_samples=8", "training.max_steps=3", "training.logging_steps=1",
         "training.per_device_train_batch_size=8", "training.num_generations=4", "eval.before_after=false",
         "output.report_to=none"]
LORA = ["model.freeze_vision_tower=false", "model.lora.r=4", "model.lora.alpha=8", "model.lora.dropout=0.0",
        "model.lora.target_modules=[q_proj,v_proj]", "training.learning_rate=5e-2"]

IMAGE_REWARD = '''
def sees_one_image(completions, images, **kwargs):
    """1.0 per completion whose row came with exactly one 32x32 image, as TRL passes them."""
    return [float(len(imgs) == 1 and imgs[0].size == (32, 32)) for imgs in images]
'''


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo_cli import train

    out = tmp_path_factory.mktemp("vlm") / "run"
    assert train(load_recipe(DEMO, SMALL + LORA), output_dir=out).status == "completed"
    return out


def _state(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def _image_logits(model_dir: Path, adapter: Path | None = None):  # type: ignore[no-untyped-def]
    """Logits of the model on a real image prompt built by the processor (pixel values included)."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir if adapter is None else adapter)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    image = Image.open(ROOT / "grpo_cli/assets/tiny-shapes-data/images/test-0000.png").convert("RGB")
    messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                             {"type": "text", "text": "What colour is the shape?"}]}]
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    assert "pixel_values" in inputs
    with torch.inference_mode():
        return model.eval()(**inputs).logits


def test_lora_adapts_the_language_model_only_and_saves_the_processor(lora_run: Path) -> None:
    config = json.loads((lora_run / "adapter_config.json").read_text())
    assert "vision_tower" in config["exclude_modules"]
    adapter = _state(lora_run / "adapter_model.safetensors")
    assert adapter and all(".language_model." in k for k in adapter)
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in adapter.items()), "nothing trained"
    assert (lora_run / "processor_config.json").exists()
    manifest = json.loads((lora_run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["data"]["train_rows"] == 16


def test_merge_folds_the_adapter_and_keeps_the_processor(lora_run: Path, tmp_path: Path) -> None:
    import torch

    out = tmp_path / "merged"
    result = run_cli("merge", lora_run, "--out", out)
    assert result.exit_code == 0, result.output
    assert "AutoModelForImageTextToText" in result.output
    assert {"processor_config.json", "chat_template.jinja", "model.safetensors"} <= {p.name for p in out.iterdir()}
    merged = _image_logits(out)
    assert torch.allclose(merged, _image_logits(BASE, lora_run), atol=1e-4, rtol=0)
    assert not torch.allclose(merged, _image_logits(BASE), atol=1e-3), "the adapter changed nothing"
    before, after = _state(BASE / "model.safetensors"), _state(out / "model.safetensors")
    vision = [k for k in before if "vision_tower" in k]
    assert vision and all(torch.equal(before[k], after[k]) for k in vision)


def test_eval_samples_with_images_and_scores_merged_like_the_adapter(lora_run: Path, tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    assert run_cli("merge", lora_run, "--out", merged).exit_code == 0
    out = tmp_path / "eval"
    result = run_cli("eval", DEMO, *SMALL, "--model", lora_run, "--compare", merged, "-k", "4", "--out", out)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    scores = [m["summary"]["accuracy/mean"] for m in summary["models"]]
    assert len(scores) == 2 and scores[0] == scores[1]  # same seed, same weights: same samples
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 8 * 4 and "images" not in rows[0] and rows[0]["answer"]


def test_eval_gives_the_model_its_images(tmp_path: Path) -> None:
    """The bundled model names colours by looking: without the images it is at chance (1/6)."""
    scores = {}
    for name, extra in (("with", []), ("without", ["data.images=null"])):
        out = tmp_path / name
        result = run_cli("eval", DEMO, *SMALL, *extra, "data.max_eval_samples=24", "-k", "4", "--out", out)
        assert result.exit_code == 0, result.output
        scores[name] = json.loads((out / "summary.json").read_text())["models"][0]["summary"]["accuracy/mean"]
    assert scores["without"] <= 0.25 and scores["with"] - scores["without"] >= 0.15, scores


def test_full_fine_tune_with_a_frozen_vision_tower(tmp_path: Path) -> None:
    import torch

    from grpo_cli import train

    out = tmp_path / "full"
    overrides = [*SMALL, "training.max_steps=2", "training.learning_rate=1e-2"]
    assert train(load_recipe(DEMO, overrides), output_dir=out).status == "completed"
    before, after = _state(BASE / "model.safetensors"), _state(out / "model.safetensors")
    vision = [k for k in before if "vision_tower" in k]
    text = [k for k in before if "language_model" in k and "layers" in k]
    assert vision and all(torch.equal(before[k], after[k]) for k in vision)
    assert any(not torch.equal(before[k], after[k]) for k in text)


def test_check_rewards_passes_image_rows_to_rewards(tmp_path: Path) -> None:
    (tmp_path / "image_rewards.py").write_text(IMAGE_REWARD)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"extends: {DEMO}\nrewards:\n  - {{function: image_rewards.py:sees_one_image}}\n"
                      "  - {name: accuracy, params: {answer_format: first_word}}\n")
    for extra in ([], ["--generate"]):
        result = run_cli("check-rewards", recipe, "--samples", "2", "--json", *extra)
        assert result.exit_code in (0, 1), result.output
        report = json.loads(result.output[result.output.index("{"):])
        by_name = {r["name"]: r for r in report["rewards"]}
        assert by_name["sees_one_image"]["mean"] == 1.0 and by_name["sees_one_image"]["errors"] == 0
        assert report["groups"] == 2
