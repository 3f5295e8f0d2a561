"""Image columns for vision-language training: paths, bytes or `datasets.Image` values -> TRL's `images` column.

TRL 1.16 takes images from an `images` column (a list per row) and, for conversational prompts, inserts one
`{"type": "image"}` placeholder per image before the first user message's text; the processor's chat template
then renders the model's own image tokens. So the mapping only has to produce that column, with every
relative path resolved and every missing file reported by row before any model loads.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.schema.data import DataSection

IMAGES = "images"  # the column TRL reads
_WHERE = "data.images.column"


def image_base_dir(recipe: Recipe, data: DataSection, split: str) -> Path:
    """The folder relative image paths are resolved against (the split's first data file, or the recipe)."""
    assert data.images is not None
    if data.images.relative_to == "data_file" and data.files is not None and data.file_map.get(split):
        return recipe.resolve_path(data.file_map[split][0]).parent
    return recipe.base_dir


def image_refs(value: Any, row: int, base: Path) -> list[dict[str, Any]]:
    """One row's image value(s) as `datasets.Image` storage dicts ({"bytes", "path"}), paths checked."""
    values = list(value) if isinstance(value, list | tuple) else [value]
    if value is None or not values:
        raise GrpoError(f"row {row} has no image in column", where=_WHERE,
                        fix="Every row needs at least one image (drop text-only rows or give them an image).")
    out = []
    for v in values:
        if isinstance(v, dict) and (v.get("bytes") or v.get("path")):
            if v.get("bytes"):
                out.append({"bytes": v["bytes"], "path": None})
                continue
            v = v["path"]
        if isinstance(v, bytes | bytearray):
            out.append({"bytes": bytes(v), "path": None})
        elif isinstance(v, str):
            out.append({"bytes": None, "path": str(_local_image(v, row, base))})
        elif hasattr(v, "save") and hasattr(v, "size"):  # a PIL image (e.g. from a Python-built dataset)
            buf = io.BytesIO()
            v.save(buf, format="PNG")
            out.append({"bytes": buf.getvalue(), "path": None})
        else:
            raise GrpoError(f"row {row}: an image is a {type(v).__name__}, not a path, bytes or image", where=_WHERE,
                            fix="Give file paths, raw image bytes, or a datasets.Image column.")
    return out


def _local_image(ref: str, row: int, base: Path) -> Path:
    if ref.startswith(("http://", "https://")):
        raise GrpoError(f"row {row}: image {ref} is a URL; grpo does not download images", where=_WHERE,
                        fix="Download the images with your own loader and give local paths (or bytes).")
    path = Path(ref).expanduser()
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        raise GrpoError(f"row {row}: image file {path} not found", where=_WHERE,
                        fix=f"Relative paths are resolved against {base}; fix the path or `data.images.relative_to`.")
    return path


def attach_images(ds: Any, recipe: Recipe, data: DataSection, split: str) -> Any:
    """Add TRL's `images` column (a list of `datasets.Image` per row), built from `data.images.column`."""
    import datasets

    assert data.images is not None
    column = data.images.column
    if column not in ds.column_names:
        raise GrpoError(f"image column {column!r} not in the {split} data", where=_WHERE,
                        fix=f"Available columns: {', '.join(ds.column_names)}.")
    feature = ds.features[column]
    if isinstance(feature, datasets.Image):  # keep the stored bytes/paths: no decode and re-encode
        ds = ds.cast_column(column, datasets.Image(decode=False))
    elif isinstance(feature, datasets.Sequence | datasets.List) and isinstance(feature.feature, datasets.Image):
        ds = ds.cast_column(column, datasets.List(datasets.Image(decode=False)))
    base = image_base_dir(recipe, data, split)
    ds = ds.map(lambda row, i: {IMAGES: image_refs(row[column], i, base)}, with_indices=True,
                features=_features_with_images(ds, column), desc="resolving images")
    return ds


def _features_with_images(ds: Any, column: str) -> Any:
    import datasets

    features = ds.features.copy()
    features[IMAGES] = datasets.List(datasets.Image())
    return features


# ---------------------------------------------------------------------------- cheap checks for `grpo validate`


def peek_images(recipe: Recipe, data: DataSection, split: str, path: Path) -> list[tuple[int, list[tuple[int, int]]]]:
    """(row, [(width, height), ...]) for the first `check_rows` rows of a local .jsonl/.json file.

    Opens each image with PIL (which reads the header only), so missing or unreadable files fail here, by row,
    rather than after the model loaded. Other formats (csv, parquet) are checked when training maps the data.
    """
    from PIL import Image, UnidentifiedImageError

    assert data.images is not None
    rows = _first_rows(path, data.images.check_rows)
    base = image_base_dir(recipe, data, split)
    sizes = []
    for i, row in enumerate(rows):
        if data.images.column not in row:
            raise GrpoError(f"row {i} of {path.name} has no column {data.images.column!r}", where=_WHERE,
                            fix=f"Columns of that row: {', '.join(row)}.")
        row_sizes = []
        for ref in image_refs(row[data.images.column], i, base):
            source = ref["path"] or io.BytesIO(ref["bytes"])
            try:
                with Image.open(source) as im:
                    row_sizes.append(im.size)
            except (UnidentifiedImageError, OSError) as exc:
                raise GrpoError(f"row {i}: image {ref['path'] or '(bytes)'} cannot be opened: {exc}",
                                where=_WHERE, fix="Give PNG/JPEG/WebP... files that PIL can read.") from None
        sizes.append((i, row_sizes))
    return sizes


def _first_rows(path: Path, n: int) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if len(rows) >= n:
                    break
                if line.strip():
                    rows.append(json.loads(line))
        return rows
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), [data])
        return [r for r in data[:n] if isinstance(r, dict)]
    return []


# ---------------------------------------------------------------------------- image tokens


def is_processor(obj: Any) -> bool:
    """A multimodal processor (image processor + tokenizer) rather than a plain tokenizer."""
    return obj is not None and hasattr(obj, "image_processor") and hasattr(obj, "tokenizer")


def image_token_counts(processor: Any, sizes: list[tuple[int, int]]) -> list[int]:
    """Tokens each image (width, height) becomes in the prompt, from the processor's own settings."""
    try:
        data = processor._get_num_multimodal_tokens(image_sizes=[(h, w) for w, h in sizes])
        counts = data["num_image_tokens"] if isinstance(data, dict) else data.num_image_tokens
        return [int(c) for c in counts]
    except (AttributeError, NotImplementedError, KeyError, TypeError):
        seq = getattr(processor, "image_seq_length", None) or getattr(processor, "image_seq_len", None) or 0
        return [int(seq)] * len(sizes)


def image_sizes(ds: Any) -> list[list[tuple[int, int]]]:
    """(width, height) of every image of every row, from the file headers (nothing is decoded)."""
    import datasets
    from PIL import Image

    raw = ds.cast_column(IMAGES, datasets.List(datasets.Image(decode=False)))[IMAGES]
    out = []
    for refs in raw:
        row = []
        for ref in refs or []:
            with Image.open(io.BytesIO(ref["bytes"]) if ref.get("bytes") else ref["path"]) as im:
                row.append(im.size)
        out.append(row)
    return out
