"""Image rows for vision-language recipes: paths, bytes, several images per row, clear errors, no truncation."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.loader import load_recipe
from tests.conftest import RECIPES, ROOT, assert_paragraph, run_cli

TINY_VLM = ROOT / "grpo_cli" / "assets" / "tiny-vlm"
COLOURS = {"red": (220, 40, 40), "blue": (40, 70, 220)}


def _png(path: Path, colour: str, size: tuple[int, int] = (32, 32)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, COLOURS[colour]).save(path)
    return path


def _png_bytes(colour: str, size: tuple[int, int] = (24, 16)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, COLOURS[colour]).save(buf, format="PNG")
    return buf.getvalue()


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _recipe(tmp_path: Path, data_file: str, extra: str = "", model: str = str(TINY_VLM),
            images: str = "{column: image}") -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(f"""
model: {{name_or_path: {model}, dtype: float32}}
data:
  files: {{train: {data_file}}}
  prompt: {{column: question, chat: true}}
  images: {images}
{extra}
rewards: [{{name: accuracy, params: {{answer_format: first_word}}}}]
training: {{max_completion_length: 8, per_device_train_batch_size: 8, num_generations: 4}}
launch: {{profile: cpu}}
""", encoding="utf-8")
    return path


def _prepare(recipe_path: Path, tokenizer=None):  # type: ignore[no-untyped-def]
    from grpo_cli.data import prepare_data

    return prepare_data(load_recipe(recipe_path), tokenizer)


def test_paths_relative_to_the_data_file_become_trl_images(tmp_path: Path) -> None:
    _png(tmp_path / "data" / "imgs" / "a.png", "red")
    _png(tmp_path / "data" / "imgs" / "b.png", "blue", (40, 20))
    _jsonl(tmp_path / "data" / "train.jsonl", [
        {"image": "imgs/a.png", "question": "What colour?", "answer": "red"},
        {"image": "imgs/b.png", "question": "What colour?", "answer": "blue"}])
    train = _prepare(_recipe(tmp_path, "data/train.jsonl", "  shuffle: false")).train
    assert "image" not in train.column_names  # replaced by TRL's column
    first, second = train[0], train[1]
    assert first["prompt"] == [{"role": "user", "content": "What colour?"}]
    assert [im.size for im in first["images"]] == [(32, 32)]
    assert second["images"][0].size == (40, 20)
    assert second["images"][0].convert("RGB").getpixel((0, 0)) == COLOURS["blue"]


def test_paths_relative_to_the_recipe(tmp_path: Path) -> None:
    _png(tmp_path / "pics" / "a.png", "red")
    _jsonl(tmp_path / "data" / "train.jsonl", [{"image": "pics/a.png", "question": "Q", "answer": "red"}])
    recipe = _recipe(tmp_path, "data/train.jsonl", images="{column: image, relative_to: recipe}")
    assert _prepare(recipe).train[0]["images"][0].size == (32, 32)


def test_raw_bytes_and_several_images_per_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"image": [[_png_bytes("red"), _png_bytes("blue")], [_png_bytes("blue")]],
                      "question": ["Colours, left to right?", "Colour?"], "answer": ["red", "blue"]})
    pq.write_table(table, tmp_path / "train.parquet")
    train = _prepare(_recipe(tmp_path, "train.parquet", "  shuffle: false")).train
    assert [len(r) for r in train["images"]] == [2, 1]
    left, right = train[0]["images"]
    assert left.convert("RGB").getpixel((0, 0)) == COLOURS["red"]
    assert right.convert("RGB").getpixel((0, 0)) == COLOURS["blue"]


def test_a_datasets_image_column(tmp_path: Path) -> None:
    import datasets

    ds = datasets.Dataset.from_dict({"image": [Image.new("RGB", (8, 8), COLOURS["red"])], "question": ["Q"],
                                     "answer": ["red"]}).cast_column("image", datasets.Image())
    ds.to_parquet(str(tmp_path / "train.parquet"))
    train = _prepare(_recipe(tmp_path, "train.parquet")).train
    assert train[0]["images"][0].size == (8, 8)


def test_a_missing_image_names_the_row_in_validate_and_when_mapping(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", "red")
    _jsonl(tmp_path / "train.jsonl", [{"image": "a.png", "question": "Q", "answer": "red"},
                                      {"image": "gone.png", "question": "Q", "answer": "red"}])
    recipe = _recipe(tmp_path, "train.jsonl", "  shuffle: false")
    result = run_cli("validate", recipe)
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert "data.images.column" in flat and "train.jsonl line 2" in flat and "gone.png" in flat
    with pytest.raises(GrpoError, match=r"train\.jsonl line 2: image file .*gone\.png not found"):
        _prepare(recipe)


def _huge_png_header(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims width x height (its pixel data is a 1x1 image's): what PIL reads to size it."""
    import struct
    import zlib

    data = bytearray(_png_bytes("red", (1, 1)))
    ihdr = 8 + 8  # signature, then the IHDR chunk's length and type
    data[ihdr:ihdr + 8] = struct.pack(">II", width, height)
    data[ihdr + 13:ihdr + 17] = struct.pack(">I", zlib.crc32(bytes(data[12:ihdr + 13])))
    path.write_bytes(bytes(data))
    return path


def test_broken_directory_and_huge_images_are_named_by_file_line_everywhere(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", "red")
    (tmp_path / "corrupt.png").write_bytes(b"not an image at all" * 10)
    (tmp_path / "folder.png").mkdir()
    _huge_png_header(tmp_path / "huge.png", 20000, 20000)
    rows = [{"image": "a.png", "question": f"Q{i}", "answer": "red"} for i in range(50)]
    for bad in ("corrupt.png", "folder.png", "huge.png"):
        rows[40] = {**rows[40], "image": bad}  # file line 41, far past validate's first rows, shuffled in training
        _jsonl(tmp_path / "train.jsonl", rows)
        recipe = _recipe(tmp_path, "train.jsonl")
        with pytest.raises(GrpoError) as caught:
            _prepare(recipe)
        message = caught.value.render()
        assert "train.jsonl line 41" in message and bad in message, message
        assert {"corrupt.png": "cannot be opened", "folder.png": "is a directory",
                "huge.png": "20000x20000 (400 megapixels), more than data.images.max_pixels (64 megapixels)"}[bad] \
            in message
        rows[0] = {**rows[0], "image": bad}  # on the first row `grpo validate` finds it too
        _jsonl(tmp_path / "train.jsonl", rows)
        result = run_cli("validate", recipe)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "train.jsonl line 1" in " ".join(result.output.split()), result.output
        rows[0] = rows[1]
    # The limit is a recipe setting: raised, the huge header passes the mapping (its pixels are never decoded here).
    rows[40] = {**rows[40], "image": "huge.png"}
    _jsonl(tmp_path / "train.jsonl", rows)
    assert len(_prepare(_recipe(tmp_path, "train.jsonl", images="{column: image, max_pixels: 500000000}")).train)


def test_validate_opens_the_first_images_and_reports_their_sizes() -> None:
    from grpo_cli.validation import preflight

    result = run_cli("validate", RECIPES / "vlm-demo.yaml")
    assert result.exit_code == 0, result.output
    assert "vision-language" in result.output
    plan = preflight(load_recipe(RECIPES / "vlm-demo.yaml")).plan
    assert plan["images"] == "column 'image': first 4 row(s) open, 1 image(s) per row, sizes 32x32"


def test_image_tokens_count_towards_max_prompt_tokens(tmp_path: Path) -> None:
    """The prompt is ~44 text tokens + 16 image tokens: a 50-token limit drops it, a 64-token one keeps it."""
    from transformers import AutoProcessor

    _png(tmp_path / "a.png", "red")
    _jsonl(tmp_path / "train.jsonl", [{"image": "a.png", "question": "What colour is the shape?", "answer": "red"},
                                      {"image": "a.png", "question": "What colour is the shape? " * 3,
                                       "answer": "red"}])
    processor = AutoProcessor.from_pretrained(TINY_VLM)
    kept = _prepare(_recipe(tmp_path, "train.jsonl", "  max_prompt_tokens: 64"), processor)
    assert kept.stats["train_rows"] == 1 and kept.stats["train_dropped_long"] == 1
    from grpo_cli.data import prompt_token_length

    n = prompt_token_length(kept.train[0]["prompt"], processor, [(32, 32)])
    real = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image", "image": kept.train[0]["images"][0]},
                                      {"type": "text", "text": "What colour is the shape?"}]}],
        add_generation_prompt=True, tokenize=True, return_dict=True)
    assert len(real["input_ids"][0]) == n == 60  # exactly what the processor feeds the model
    with pytest.raises(GrpoError, match="no training rows"):
        _prepare(_recipe(tmp_path, "train.jsonl", "  max_prompt_tokens: 50"), processor)


def test_truncation_is_refused_for_images_and_for_a_vision_language_model(tmp_path: Path) -> None:
    result = run_cli("validate", RECIPES / "vlm-demo.yaml", "data.prompt_overflow=truncate")
    assert result.exit_code == 2
    assert "truncate cannot be used with images" in result.output and "image tokens" in result.output
    result = run_cli("validate", RECIPES / "vlm-demo.yaml", "data.prompt_overflow=truncate", "data.images=null")
    assert result.exit_code == 2
    assert "data.prompt_overflow" in result.output and "vision-language model" in result.output


def test_continuous_batching_with_a_processor_is_refused() -> None:
    result = run_cli("validate", RECIPES / "vlm-demo.yaml", "training.use_transformers_continuous_batching=true")
    assert result.exit_code == 2
    assert "continuous batching" in result.output and "vLLM" in result.output


def test_images_for_a_text_only_model_are_refused(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", "red")
    _jsonl(tmp_path / "train.jsonl", [{"image": "a.png", "question": "Q", "answer": "red"}])
    result = run_cli("validate", _recipe(tmp_path, "train.jsonl", model="bundled:tiny-arith"))
    assert_paragraph(result, "text-only model")


def test_image_rows_need_chat_prompts(tmp_path: Path) -> None:
    result = run_cli("validate", RECIPES / "vlm-demo.yaml", "data.prompt.chat=false")
    assert_paragraph(result, "chat prompts")


def test_the_real_model_recipe_validates_offline() -> None:
    result = run_cli("validate", RECIPES / "vlm.yaml")
    assert result.exit_code == 0, result.output
    assert "vision-language" in result.output


def test_memory_plan_counts_the_vision_encoder_and_image_tokens() -> None:
    from grpo_cli.planning.memory import memory_plan

    recipe = load_recipe(RECIPES / "vlm-demo.yaml")
    plan, why = memory_plan(recipe, gpu_memory_gb=None, world_size=1)
    assert plan is not None, why
    assert plan.item("vision encoder weights") is not None
    assert any("includes the image tokens (up to 16 per image" in n for n in plan.notes)
    unset = load_recipe(RECIPES / "vlm-demo.yaml", ["data.max_prompt_tokens=null"])
    plan, _ = memory_plan(unset, gpu_memory_gb=None, world_size=1)
    assert plan is not None and any("+ 16 image tokens" in n for n in plan.notes)


def test_image_tokens_per_image_from_processor_settings() -> None:
    from grpo_cli.models.vision import max_image_tokens

    qwen25_vl = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "merge_size": 2,
                 "image_processor_type": "Qwen2VLImageProcessor"}
    assert max_image_tokens(qwen25_vl) == 16384
    assert max_image_tokens({"image_seq_len": 64, "image_processor": {"size": {"longest_edge": 512}}}) == 64
    llava = {"patch_size": 14, "image_processor": {"crop_size": {"height": 336, "width": 336}}}
    assert max_image_tokens(llava) == 576
