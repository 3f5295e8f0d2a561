"""Where a model's config (its shape) comes from, without any download.

In order: the config.json of a local model directory or of the Hugging Face cache; the recipe's
`model.shape` block; grpo's shipped table (assets/model_shapes.json), whose entries hold config.json's
own keys for a family of hub ids, the config.json they were transcribed from and the parameter count
the model card publishes. Read by the memory plan and by the TRL rules that depend on the model.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.model_files import regular_file_problem
from grpo_cli.paths import ASSETS_DIR, hub_cache_file, is_gguf_reference

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

TABLE = ASSETS_DIR / "model_shapes.json"
_META = ("ids", "source", "published_params", "extra_params_note")


@cache
def _entries() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(TABLE.read_text(encoding="utf-8"))["models"])


def _normalise(ref: str) -> str:
    return ref.strip().rstrip("/").lower()


def shipped_shape(ref: str) -> tuple[dict[str, Any], str] | None:
    """(config-like dict, where from) for a hub id in the table (case-insensitive), else None."""
    want = _normalise(ref)
    for entry in _entries():
        if any(_normalise(i) == want for i in entry["ids"]):
            config = {k: v for k, v in entry.items() if k not in _META}
            return config, f"grpo's shipped shape table ({entry['source']})"
    owner, _, name = want.partition("/")
    if owner == "unsloth" and name:  # unsloth re-publishes models under their own names (4-bit copies too)
        for suffix in ("-unsloth-bnb-4bit", "-bnb-4bit"):
            name = name.removesuffix(suffix)
        for entry in _entries():
            match = next((i for i in entry["ids"] if _normalise(i).partition("/")[2] == name), None)
            if match is not None:
                config = {k: v for k, v in entry.items() if k not in _META}
                return config, f"grpo's shipped shape table ({entry['source']}; unsloth's mirror of {match})"
    return None


def shipped_model_ids() -> list[str]:
    """Every hub id the table knows, in table order."""
    return [i for entry in _entries() for i in entry["ids"]]


def shipped_entries() -> list[dict[str, Any]]:
    """The raw entries (for tests and docs)."""
    return [dict(e) for e in _entries()]


def find_model_config(recipe: Recipe) -> tuple[dict[str, Any] | None, str]:
    """(config.json contents, where from) or (None, why not). Never touches the network.

    A local directory's or the HF cache's config.json wins; then the recipe's `model.shape`; then
    grpo's shipped shape table (assets/model_shapes.json).
    """
    ref = recipe.model.name_or_path
    local = recipe.local_model_dir(ref)
    if local is not None and is_gguf_reference(str(local)):
        if not local.is_file():
            return None, f"GGUF file {local} not found"
        from grpo_cli.gguf.source import read_header

        info = read_header(local)
        return info.config(), f"the GGUF header of {local.name}"
    if local is not None:
        path = local / "config.json"
        if not path.exists() and not path.is_symlink():
            return None, f"{local} has no config.json"
        return read_config(path), str(path)  # a directory, a pipe or a dangling link: one paragraph there
    cached = hub_cache_file(ref, "config.json", recipe.model.revision)
    if cached is not None:
        return read_config(Path(cached)), f"hub cache {cached}"
    if recipe.model.shape is not None:
        return recipe.model.shape.model_dump(exclude_none=True), "the recipe's model.shape"
    shipped = shipped_shape(ref)
    if shipped is not None:
        return shipped
    return None, (f"{ref}'s config.json is not in the local HF cache and grpo's shape table does not know it; "
                  f"`hf download {ref} config.json` or a `model.shape` block enables it (the plan never downloads)")


def read_config(path: Path) -> dict[str, Any]:
    """A config.json as a dict, or one paragraph naming it (binary, not JSON, not an object, unreadable): every
    check that reads the model's shape would otherwise fail on it with a traceback of its own. A named pipe or a
    device is never opened (reading it would block or never end)."""
    why = regular_file_problem(path)
    if why is not None:
        raise GrpoError(f"{path} {why}", where="model.name_or_path", fix=_FIX)
    try:
        config = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise GrpoError(f"cannot read {path}: {exc.strerror or exc}", where="model.name_or_path",
                        fix="Check the file's permissions, or point model.name_or_path at another model.") from None
    except ValueError as exc:  # not UTF-8, or not JSON
        raise GrpoError(f"{path} is not a model config ({type(exc).__name__}: {str(exc)[:120]})",
                        where="model.name_or_path", fix=_FIX) from None
    if not isinstance(config, dict):
        raise GrpoError(f"{path} is not a model config (a JSON {type(config).__name__}, not an object of the model's "
                        "settings)", where="model.name_or_path", fix=_FIX)
    return config


_FIX = ("Restore the model's config.json (save_pretrained writes it), or point model.name_or_path at an intact model "
        "directory or a hub id.")
