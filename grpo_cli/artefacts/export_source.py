"""What `grpo export` reads and where it may write, settled before a byte is written.

The model directory's config, tokenizer and weights are read once, through `model_files`' checked readers, into
an `ExportSource`: a damaged, missing or foreign file is one paragraph naming it and the fix, never a traceback
from the middle of a conversion. The output path is held to one rule: it never lands on one of the model's own
files, `--force` or not (a GGUF written over model.safetensors destroys the model it was made from).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli.artefacts.card import CARD_FILE, GGUF_RECORD
from grpo_cli.errors import GrpoError
from grpo_cli.model_files import WEIGHTS_GLOB, read_json_object, regular_file_problem, weight_files

ARCHS = {"llama": "LLAMA", "qwen2": "QWEN2"}
SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
"""config.json keys the GGUF header cannot be written without (positive integers)."""
GGUF_SUFFIX = ".gguf"
_RESAVE = ("Re-save the model (model.save_pretrained(DIR), tokenizer.save_pretrained(DIR)) or copy its files "
           "again; a copy cut short or edited by hand leaves such a file.")


@dataclass
class ExportSource:
    """A model directory as export reads it: its settings, its tokenizer and its whole weights files."""

    directory: Path
    config: dict[str, Any]
    tokenizer: dict[str, Any]
    weights: list[Path]

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])


def read_source(model_dir: Path) -> ExportSource:
    """The model in `model_dir` read checked: config.json with its shape, tokenizer.json as byte-level BPE,
    whole safetensors weights. Everything refused here is refused before any file is written."""
    if not model_dir.is_dir():
        raise GrpoError(f"{model_dir} is not a directory", where="DIR", fix="Give a merged model's directory.")
    config_path = model_dir / "config.json"
    if (model_dir / "adapter_config.json").is_file() and not config_path.exists():
        raise GrpoError(f"{model_dir} holds a LoRA adapter, not a whole model", where="DIR",
                        fix=f"Merge it first: grpo merge {model_dir} --out DIR, then grpo export DIR --gguf.")
    config = read_json_object(config_path, what="the model's config", where="DIR", fix=_RESAVE,
                              missing_fix="Give a merged model or a full fine-tune's output dir (with config.json).")
    if config.get("model_type") not in ARCHS:
        raise GrpoError(f"{model_dir} is a {config.get('model_type')!r} model; GGUF export writes Llama and Qwen2",
                        where="DIR", fix="Use llama.cpp's convert_hf_to_gguf.py for other architectures.")
    for key in SHAPE_KEYS:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise GrpoError(f"{config_path} has no usable `{key}` (found {value!r}); the GGUF header needs it",
                            where="DIR", fix=_RESAVE)
    tokenizer = _tokenizer(model_dir)
    for name in (GGUF_RECORD, CARD_FILE):  # written after the export: a directory or a FIFO there is refused now
        why = regular_file_problem(model_dir / name)
        if why is not None:
            raise GrpoError(f"{model_dir / name} {why}; grpo export records each verified GGUF there", where="DIR",
                            fix=f"Move it aside (grpo writes {name} as a file), then export again.")
    weights = weight_files(model_dir, where="DIR", fix=_RESAVE)
    if not weights:
        others = sorted(p.name for p in model_dir.glob("*.bin"))
        raise GrpoError(f"no weights found in {model_dir} (no {WEIGHTS_GLOB} file"
                        + (f"; {', '.join(others)} is PyTorch's pickle format" if others else "") + ")", where="DIR",
                        fix="Export a directory that holds the model's safetensors weights (grpo merge --out and "
                            "grpo train write them; model.save_pretrained(DIR) does too).")
    return ExportSource(model_dir, config, tokenizer, weights)


def _tokenizer(model_dir: Path) -> dict[str, Any]:
    """tokenizer.json, a byte-level BPE vocabulary (the only kind GGUF export writes)."""
    path = model_dir / "tokenizer.json"
    data = read_json_object(path, what="the tokenizer file", where="DIR", fix=_RESAVE,
                            missing_fix="GGUF export reads the fast tokenizer's tokenizer.json: save it with "
                                        "AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR).")
    model = data.get("model")
    kind = model.get("type") if isinstance(model, dict) else None
    if kind != "BPE":
        raise GrpoError(f"the tokenizer in {model_dir} is {kind!r}, not byte-level BPE", where="DIR",
                        fix="GGUF export writes byte-level BPE tokenizers (Llama 3, Qwen2, SmolLM2).")
    if not isinstance(model, dict) or not isinstance(model.get("vocab"), dict):
        raise GrpoError(f"{path} has no vocabulary (`model.vocab` is not a table of tokens)", where="DIR", fix=_RESAVE)
    return data


def default_target(source: Path, kind: str) -> Path:
    """DIR/<name>-<type>.gguf."""
    return source / f"{source.resolve().name}-{kind}{GGUF_SUFFIX}"


def check_target(source: Path, target: Path, force: bool) -> None:
    """Refuse an output path that is a directory, not a regular file, one of the model's own files (by name,
    link or hard link), a non-GGUF name inside the model directory, or an existing file without --force."""
    if target.is_dir():
        raise GrpoError(f"{target} is a directory", where="--out", fix="Give the path of the .gguf file to write.")
    fix = f"Give a new .gguf path, or leave --out out: the default is {default_target(source, 'TYPE')}."
    own = own_file(source, target)
    if own is not None:
        raise GrpoError(f"{target} is the model's own {own.name} in {source}; writing the GGUF there would destroy "
                        "the model it is made from (--force never replaces the source's files)", where="--out",
                        fix=fix)
    resolved = target.resolve()
    if resolved.is_relative_to(source.resolve()) and resolved.suffix.lower() != GGUF_SUFFIX:
        raise GrpoError(f"{target} is inside the model directory {source} and its name does not end in .gguf: a "
                        "file there that is not a GGUF would be read as part of the model", where="--out", fix=fix)
    why = regular_file_problem(target)
    if why is not None:
        raise GrpoError(f"{target} {why}", where="--out", fix="Give the path of a .gguf file to write.")
    if target.exists() and not force:
        raise GrpoError(f"{target} already exists", where="--out", fix="Choose another --out or pass --force.")


def own_file(source: Path, target: Path) -> Path | None:
    """The model's own file `target` is (through links followed, or a hard link elsewhere), or None; the
    model's files are everything in its directory but earlier .gguf exports."""
    if not target.exists():
        return None
    root, resolved = source.resolve(), target.resolve()
    if resolved.is_relative_to(root) and resolved.suffix.lower() != GGUF_SUFFIX:
        return resolved
    mine = os.stat(target)
    for path in source.iterdir():
        if path.suffix.lower() != GGUF_SUFFIX and path.is_file():
            st = path.stat()
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                return path
    return None
