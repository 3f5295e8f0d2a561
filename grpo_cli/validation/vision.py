"""Preflight checks for vision-language recipes: the image column, its first images, and the rules TRL imposes.

All cheap: the model's config.json (local directory or hub cache) says whether it is a VLM, and PIL opens only
the headers of the first rows' images. Nothing here imports torch or transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError, Problem
from grpo_cli.findings import Findings
from grpo_cli.models.vision import recipe_is_vision_language
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.schema.data import VLM_TRUNCATION_REASON

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight


def check_vision(recipe: Recipe, pf: Preflight) -> Findings:
    """Problems, warnings and plan lines for image data and vision-language models; the image column becomes
    `images` in the columns the checks after it see."""
    vlm = recipe_is_vision_language(recipe)
    data, found = recipe.data, Findings()
    if not vlm and data.images is None:
        return found
    if vlm:
        found.plan["model kind"] = "vision-language: AutoModelForImageTextToText + AutoProcessor (processing_class)"
        if data.prompt_overflow == "truncate":
            found.problems.append(Problem("data.prompt_overflow", VLM_TRUNCATION_REASON.replace(
                "with images", "for a vision-language model")))
    if recipe.training.use_transformers_continuous_batching:
        found.problems.append(Problem(
            "training.use_transformers_continuous_batching",
            "TRL does not support transformers' continuous batching with a processor (vision-language models)",
            "Remove the key (plain generate), or use vLLM (`launch.vllm.mode: colocate` or `server`)."))
    if vlm is False and data.images is not None:
        found.problems.append(Problem("data.images", f"{recipe.model.name_or_path} is a text-only model (its config "
                                   "has no vision_config), so it cannot take the images",
                                   "Use a vision-language model (e.g. Qwen/Qwen2.5-VL-3B-Instruct), or remove "
                                   "`data.images`; set `model.kind: vision_language` if detection is wrong."))
    if recipe.model.freeze_vision_tower and recipe.model.lora is not None:
        found.warnings.append("model.freeze_vision_tower has no effect with LoRA: the base weights (vision tower "
                           "included) are frozen anyway; `model.lora.vision_tower` decides whether it gets adapters.")
    if data.images is not None:
        _image_rows(recipe, pf, found)
    return found


def _image_rows(recipe: Recipe, pf: Preflight, found: Findings) -> None:
    """The image column exists; the first rows' images open; their sizes go into the plan."""
    from grpo_cli.data.images import peek_images

    data = recipe.data
    assert data.images is not None
    column = data.images.column
    columns = pf.columns  # None for a hub dataset: it is not read when validating
    if (columns is not None and data.files is not None and column not in columns
            and (data.keep_columns is None or column not in data.keep_columns)):
        found.problems.append(Problem("data.images.column", f"{column!r} is not a column of the data",
                                      f"Columns: {', '.join(columns)}."))
        return
    if columns is not None:
        pf.columns = [c for c in columns if c != column] + ["images"]
    paths = data.file_map.get(data.split) or []
    if not paths or data.images.check_rows == 0:
        found.plan["images"] = f"column {column!r} (not opened when validating)"
        return
    path = recipe.resolve_path(paths[0])
    if not path.is_file():
        return  # reported by the data checks
    try:
        rows = peek_images(recipe, data, data.split, path)
    except GrpoError as exc:
        found.problems += exc.problems
        return
    if not rows:
        found.plan["images"] = f"column {column!r} (first rows not opened: only .jsonl/.json are peeked)"
        return
    sizes = sorted({f"{w}x{h}" for _, row in rows for w, h in row})
    per_row = sorted({len(row) for _, row in rows})
    found.plan["images"] = (f"column {column!r}: first {len(rows)} row(s) open, "
                         f"{'/'.join(map(str, per_row))} image(s) per row, sizes {', '.join(sizes)}")
