"""Image columns for vision-language training: paths, bytes or `datasets.Image` values -> TRL's `images` column.

TRL 1.16 takes images from an `images` column (a list per row) and, for conversational prompts, inserts one
`{"type": "image"}` placeholder per image before the first user message's text; the processor's chat template
then renders the model's own image tokens. So the mapping only has to produce that column, with every
relative path resolved and every missing file reported by row before any model loads.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
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


def image_refs(value: Any, row: str, base: Path) -> list[dict[str, Any]]:
    """One row's image value(s) as `datasets.Image` storage dicts ({"bytes", "path"}), paths checked.

    `row` names the row in messages: its file and line ('data.jsonl line 4'), or 'row N'.
    """
    values = list(value) if isinstance(value, list | tuple) else [value]
    if value is None or not values:
        raise GrpoError(f"{row} has no image in column", where=_WHERE,
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
            raise GrpoError(f"{row}: an image is a {type(v).__name__}, not a path, bytes or image", where=_WHERE,
                            fix="Give file paths, raw image bytes, or a datasets.Image column.")
    return out


def _local_image(ref: str, row: str, base: Path) -> Path:
    if ref.startswith(("http://", "https://")):
        raise GrpoError(f"{row}: image {ref} is a URL; grpo does not download images", where=_WHERE,
                        fix="Download the images with your own loader and give local paths (or bytes).")
    path = Path(ref).expanduser()
    path = path if path.is_absolute() else base / path
    if path.is_dir():
        raise GrpoError(f"{row}: image {path} is a directory, not an image file", where=_WHERE,
                        fix="Give the path of one image file per image (a list of paths for several).")
    if not path.is_file():
        raise GrpoError(f"{row}: image file {path} not found", where=_WHERE,
                        fix=f"Relative paths are resolved against {base}; fix the path or `data.images.relative_to`.")
    return path


def image_size(ref: dict[str, Any], row: str, max_pixels: int | None) -> tuple[int, int]:
    """(width, height) from the image's header, or a GrpoError naming the row when it cannot be opened or is
    larger than `max_pixels` (data.images.max_pixels). Nothing is decoded."""
    from PIL import Image

    name = ref.get("path") or "(bytes)"
    source = io.BytesIO(ref["bytes"]) if ref.get("bytes") else ref["path"]
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None  # the header alone: no bomb check yet
    try:
        with Image.open(source) as im:
            size = im.size
    except (OSError, ValueError, Image.DecompressionBombError) as exc:  # UnidentifiedImageError is an OSError
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise GrpoError(f"{row}: image {name} cannot be opened: {why}",
                        where=_WHERE, fix="Give PNG/JPEG/WebP... files that PIL can read (re-save or drop this "
                                          "one).") from None
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    if max_pixels is not None and size[0] * size[1] > max_pixels:
        raise GrpoError(f"{row}: image {name} is {size[0]}x{size[1]} ({size[0] * size[1] / 1e6:.0f} megapixels), "
                        f"more than data.images.max_pixels ({max_pixels / 1e6:g} megapixels)",
                        where="data.images.max_pixels",
                        fix="Downscale it (the model's processor resizes every image anyway), or raise "
                            "data.images.max_pixels (null: no limit).")
    return size


def allow_pixels(max_pixels: int | None) -> None:
    """Let PIL decode what the recipe accepts: its own guard refuses images above ~179 megapixels."""
    from PIL import Image

    if max_pixels is None or (Image.MAX_IMAGE_PIXELS is not None and max_pixels > Image.MAX_IMAGE_PIXELS):
        Image.MAX_IMAGE_PIXELS = max_pixels


def attach_images(ds: Any, recipe: Recipe, data: DataSection, split: str,
                  locate: Callable[[dict[str, Any], int], str] | None = None) -> Any:
    """Add TRL's `images` column (a list of `datasets.Image` per row), built from `data.images.column`.

    Every image's header is read here (the size limit, and a broken file named by row before any step);
    `locate(row, index)` names a row in messages (its file and line), default 'row N'.
    """
    import datasets

    assert data.images is not None
    column, max_pixels = data.images.column, data.images.max_pixels
    if column not in ds.column_names:
        raise GrpoError(f"image column {column!r} not in the {split} data", where=_WHERE,
                        fix=f"Available columns: {', '.join(ds.column_names)}.")
    feature = ds.features[column]
    if isinstance(feature, datasets.Image):  # keep the stored bytes/paths: no decode and re-encode
        ds = ds.cast_column(column, datasets.Image(decode=False))
    elif isinstance(feature, datasets.Sequence | datasets.List) and isinstance(feature.feature, datasets.Image):
        ds = ds.cast_column(column, datasets.List(datasets.Image(decode=False)))
    base = image_base_dir(recipe, data, split)
    name = locate or (lambda row, i: f"row {i}")
    allow_pixels(max_pixels)

    def resolve(row: dict[str, Any], i: int) -> dict[str, Any]:
        refs = image_refs(row[column], name(row, i), base)
        for ref in refs:
            image_size(ref, name(row, i), max_pixels)
        return {IMAGES: refs}

    return ds.map(resolve, with_indices=True, features=_features_with_images(ds, column), desc="resolving images")


def _features_with_images(ds: Any, column: str) -> Any:
    import datasets

    features = ds.features.copy()
    features[IMAGES] = datasets.List(datasets.Image())
    return features


# ---------------------------------------------------------------------------- cheap checks for `grpo validate`


def peek_images(recipe: Recipe, data: DataSection, split: str, path: Path) -> list[tuple[int, list[tuple[int, int]]]]:
    """(row, [(width, height), ...]) for the first `check_rows` rows of a local .jsonl/.json file.

    Opens each image with PIL (which reads the header only), so missing, unreadable or too large files fail
    here, by file and line, rather than after the model loaded. Other formats (csv, parquet) are checked when
    training maps the data.
    """
    assert data.images is not None
    rows = _first_rows(path, data.images.check_rows)
    base = image_base_dir(recipe, data, split)
    sizes = []
    for i, (line, row) in enumerate(rows):
        where = f"{path.name} line {line}" if line else f"record {i} of {path.name}"
        if data.images.column not in row:
            raise GrpoError(f"{where} has no column {data.images.column!r}", where=_WHERE,
                            fix=f"Columns of that row: {', '.join(row)}.")
        refs = image_refs(row[data.images.column], where, base)
        sizes.append((i, [image_size(ref, where, data.images.max_pixels) for ref in refs]))
    return sizes


def _first_rows(path: Path, n: int) -> list[tuple[int | None, dict[str, Any]]]:
    """(file line or None, record) of the first n records."""
    if path.suffix == ".jsonl":
        rows: list[tuple[int | None, dict[str, Any]]] = []
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if len(rows) >= n:
                    break
                if line.strip():
                    rows.append((number, json.loads(line)))
        return rows
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), [data])
        return [(None, r) for r in data[:n] if isinstance(r, dict)]
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
