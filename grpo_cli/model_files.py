"""A model directory's files read checked: its JSON files (config.json, tokenizer.json) as JSON objects and its
weights as whole safetensors files, each refused in one paragraph that names the file and the fix.

`grpo export`, `grpo push` and the GGUF conversion cache read a model's files here rather than through
transformers or safetensors, whose errors for a damaged copy are tracebacks or advice about the network, and for
a named pipe standing where a file belongs are a read that never ends. Headers only: nothing loads a tensor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.paths import read_text

WEIGHTS_GLOB = "*.safetensors"
NOT_REGULAR = "is not a regular file (a device, a named pipe or a socket)"
"""What a path that exists but is no file on disk is called, wherever grpo reads one."""


def regular_file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a file (a directory, a device, a FIFO, a link to nothing), or None (a regular
    file, or nothing there). Reading a FIFO or /dev/urandom would block or never end, so nothing opens such a
    path."""
    if path.is_dir():
        return "is a directory, not a file"
    if path.exists() and not path.is_file():
        return NOT_REGULAR
    if path.is_symlink() and not path.exists():
        return f"is a symbolic link to nothing (it points to {os.readlink(path)}, which does not exist)"
    return None


def read_json_object(path: Path, *, what: str, where: str, fix: str, missing_fix: str = "") -> dict[str, Any]:
    """The JSON object in `path`; GrpoError (exit 2) when it is missing, not a regular file, binary, not UTF-8,
    empty, not JSON, or JSON but not an object. `fix` says how to repair a damaged file."""
    data = read_json_value(path, what=what, where=where, fix=fix, missing_fix=missing_fix, kind=dict)
    assert isinstance(data, dict)
    return data


def read_json_value(path: Path, *, what: str, where: str, fix: str, missing_fix: str = "",
                    kind: type = dict) -> Any:
    """`read_json_object` for a file that holds `kind` (a list: grpo_gguf.json)."""
    text = read_text(path, what=what, where=where, missing_fix=missing_fix or fix, damaged_fix=fix)
    name = f"{what} {path}" if where != str(path) else what
    if not text.strip():
        raise GrpoError(f"{name} is empty", where=where, fix=fix)
    try:
        data = json.loads(text)
    except ValueError as exc:
        line = f" (line {exc.lineno}, column {exc.colno}: {exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
        raise GrpoError(f"{name} is not valid JSON{line}", where=where, fix=fix) from None
    if not isinstance(data, kind):
        wanted = "an object of settings" if kind is dict else f"a JSON {kind.__name__}"
        raise GrpoError(f"{name} holds a JSON {type(data).__name__}, not {wanted}", where=where, fix=fix)
    return data


def safetensors_problem(path: Path) -> str | None:
    """Why a .safetensors file is not whole (not a regular file, header length, header JSON, tensor offsets against
    the file size), or None; read from its header alone."""
    why = regular_file_problem(path)
    if why is not None:
        return why
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length < 0 or 8 + length > size:
                return f"its header does not fit in the file ({size:,} bytes)"
            header = json.loads(f.read(length))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return "its header is not a safetensors tensor table"
    if 8 + length + end != size:
        return f"its tensors need {8 + length + end:,} bytes and the file has {size:,}"
    return None


def weight_files(model_dir: Path, *, where: str, fix: str) -> list[Path]:
    """The safetensors files of `model_dir`, sorted, each whole (header and size checked); [] when there are none.
    A damaged one is a GrpoError naming it."""
    files = sorted(model_dir.glob(WEIGHTS_GLOB))
    for file in files:
        why = safetensors_problem(file)
        if why is not None and regular_file_problem(file) is not None:
            raise GrpoError(f"{file} {why}", where=where, fix="Put the saved weights file itself there (a device, a "
                            "named pipe or a link to one, or to nothing, is no model file).")
        if why is not None:
            raise GrpoError(f"{file} is damaged or truncated: {why}", where=where, fix=fix)
    return files


def model_dir_problem(model_dir: Path, files: tuple[str, ...] = ("config.json", "tokenizer.json")) -> str | None:
    """What is wrong with a saved model directory (`files` missing or not JSON objects, no weights or a damaged
    weights file), or None: what a cache checks before it hands a directory out as whole."""
    for name in files:
        try:
            read_json_object(model_dir / name, what=name, where=str(model_dir / name), fix="")
        except GrpoError as exc:
            return exc.problems[0].what
    weights = sorted(model_dir.glob(WEIGHTS_GLOB))
    if not weights:
        return f"it holds no weights ({WEIGHTS_GLOB})"
    for file in weights:
        why = safetensors_problem(file)
        if why is not None:
            return f"{file.name}: {why}"
    return None
