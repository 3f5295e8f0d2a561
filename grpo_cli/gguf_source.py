"""GGUF files as model sources: read the header without dequantising, convert once to a safetensors cache.

A `.gguf` reference (a path, or `package:NAME/FILE.gguf` for a file shipped inside an installed Python package)
names a llama.cpp model file. `grpo validate` and `grpo memory` read its shape and quantisation from the header
alone (a small parser here: no numpy, no torch). Everything that loads weights asks `materialize()`, which
dequantises the file once with transformers + `gguf` and saves an ordinary safetensors model directory (config,
weights, tokenizer, chat template) in the cache, keyed by the file's SHA-256; every later load reads that directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any, BinaryIO

from grpo_cli.errors import GrpoError

CACHE_ENV = "GRPO_CACHE_DIR"
"""Where converted models live: $GRPO_CACHE_DIR/gguf, default ~/.cache/grpo/gguf."""
MARKER = "grpo-gguf.json"
"""Written last into a converted directory: a directory without it is an interrupted conversion."""

# The GGUF architectures transformers can dequantise into a model class (transformers 5.x,
# modeling_gguf_pytorch_utils.GGUF_SUPPORTED_ARCHITECTURES less its `general`/`tokenizer` keys); a test holds this
# table against the installed transformers. GGUF spells some names differently.
SUPPORTED_ARCHITECTURES = ("bloom", "deci", "falcon", "gemma2", "gemma3", "gemma4", "gpt2", "gpt_oss", "lfm2",
                           "llama", "mamba", "minimax_m2", "mistral", "nemotron", "phi3", "qwen2", "qwen2_moe",
                           "qwen3", "qwen3_moe", "stablelm", "starcoder2", "t5", "umt5")
ARCHITECTURE_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss",
                        "minimax-m2": "minimax_m2", "mistral3": "mistral"}
# Tensor types the `gguf` package dequantises (gguf.quants' type traits plus the plain float types); held
# against the installed `gguf` by a test.
DEQUANTISABLE = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                 "Q6_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS",
                 "TQ1_0", "TQ2_0", "MXFP4", "NVFP4")
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
              11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS",
              18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
              26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
              40: "NVFP4", 41: "Q1_0"}
# GGUF metadata key (after `<arch>.`) -> config.json key, for the memory plan's shape.
_SHAPE_KEYS = {"embedding_length": "hidden_size", "feed_forward_length": "intermediate_size",
               "block_count": "num_hidden_layers", "attention.head_count": "num_attention_heads",
               "attention.head_count_kv": "num_key_value_heads", "context_length": "max_position_embeddings",
               "vocab_size": "vocab_size", "attention.key_length": "head_dim"}
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass
class GgufInfo:
    """What the header of a GGUF file says, read without touching the tensor data."""

    path: Path
    architecture: str
    """GGUF's name for it (llama, qwen2, ...)."""
    metadata: dict[str, Any]
    """Scalar and string metadata (arrays are summarised by their length)."""
    tensor_types: dict[str, int] = field(default_factory=dict)
    """Tensor type name -> number of tensors of that type."""
    parameters: int = 0
    has_output_weight: bool = True

    @property
    def model_type(self) -> str:
        """The transformers model_type this architecture converts to."""
        return ARCHITECTURE_ALIASES.get(self.architecture, self.architecture)

    @property
    def quantization(self) -> str:
        """The dominant quantised tensor type, e.g. Q4_1 (F32 when nothing is quantised)."""
        quantised = {k: v for k, v in self.tensor_types.items() if k not in ("F32", "F64", "I32", "I64")}
        return max(quantised, key=lambda k: quantised[k]) if quantised else "F32"

    def describe(self) -> str:
        """One line: file, architecture, size and quantisation."""
        types = ", ".join(f"{k} x{v}" for k, v in sorted(self.tensor_types.items(), key=lambda kv: -kv[1]))
        return (f"GGUF {self.path.name}: {self.model_type}, {self.parameters / 1e6:.1f}M parameters, "
                f"{self.quantization} ({types})")

    def unsupported(self) -> list[str]:
        """Why transformers cannot dequantise this file (architecture, tensor types), empty when it can."""
        out = []
        if self.model_type not in SUPPORTED_ARCHITECTURES:
            out.append(f"architecture `{self.architecture}` is not one transformers converts from GGUF "
                       f"(it converts {', '.join(SUPPORTED_ARCHITECTURES)})")
        bad = sorted(t for t in self.tensor_types if t not in DEQUANTISABLE)
        if bad:
            out.append(f"tensor type(s) {', '.join(bad)} cannot be dequantised by the `gguf` package "
                       f"(it reads {', '.join(DEQUANTISABLE)})")
        return out

    def config(self) -> dict[str, Any]:
        """A config.json-like dict of the shape (for the memory plan), from the header alone."""
        arch = self.architecture
        out: dict[str, Any] = {"model_type": self.model_type, "tie_word_embeddings": not self.has_output_weight,
                               "gguf_quantization": self.quantization}
        for key, name in _SHAPE_KEYS.items():
            value = self.metadata.get(f"{arch}.{key}")
            if isinstance(value, int):
                out[name] = value
        if "vocab_size" not in out and isinstance(self.metadata.get("tokenizer.ggml.tokens"), _ArrayLen):
            out["vocab_size"] = int(self.metadata["tokenizer.ggml.tokens"])
        out.setdefault("num_key_value_heads", out.get("num_attention_heads"))
        return out

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None


class _ArrayLen(int):
    """An array's length standing in for its contents (token lists are large and the plan needs only the count)."""


class _Reader:
    """Reads GGUF header fields from an in-memory prefix of the file (one read, no per-field system calls)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.buf = f.read(1 << 22)
        self.pos = 0

    def need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            more = self.f.read(max(n, 1 << 22))
            if not more:
                raise ValueError("the file ends inside its header (truncated)")
            self.buf = self.buf[self.pos:] + more
            self.pos = 0
            self.need(n)

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        self.need(size)
        values = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return values

    def string(self) -> str:
        (n,) = self.unpack("<Q")
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Skip `count` length-prefixed strings (a tokenizer's vocabulary: tens of thousands), in a tight loop
        over the buffer, refilling it only when a string crosses its end."""
        unpack_from, done = struct.unpack_from, 0
        while done < count:
            buf, pos, end = self.buf, self.pos, len(self.buf) - 8
            while done < count and pos <= end:
                nxt = pos + 8 + unpack_from("<Q", buf, pos)[0]
                if nxt > len(buf):
                    break
                pos, done = nxt, done + 1
            self.pos = pos
            if done < count:
                self.need(8)
                (n,) = struct.unpack_from("<Q", self.buf, self.pos)
                self.need(8 + n)
                self.pos += 8 + n
                done += 1

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])[0]
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack("<IQ")
            if etype in _SCALARS:
                size = count * struct.calcsize(_SCALARS[etype])
                self.need(size)
                self.pos += size
            elif etype == _STRING:
                self.skip_strings(count)
            else:
                for _ in range(count):
                    self.value(etype)
            return _ArrayLen(count)
        raise ValueError(f"unknown metadata value type {vtype}")


def read_header(path: Path) -> GgufInfo:
    """The header of `path`, parsed once per process while the file is unchanged (validate's model checks and its
    memory plan both ask for it)."""
    try:
        st = path.stat()
    except OSError:
        return _parse_header(path)  # the clear error for a missing or unreadable file
    return _cached_header(str(path.resolve()), st.st_size, st.st_mtime_ns)


@cache
def _cached_header(path: str, size: int, mtime_ns: int) -> GgufInfo:
    return _parse_header(Path(path))


def _parse_header(path: Path) -> GgufInfo:
    """Parse a GGUF file's metadata and tensor table (milliseconds: token arrays are skipped, not decoded)."""
    try:
        with open(path, "rb") as f:
            r = _Reader(f)
            r.need(4)
            if r.buf[:4] != b"GGUF":
                raise ValueError("it does not start with the GGUF magic bytes")
            r.pos = 4
            (version,) = r.unpack("<I")
            if version < 2:
                raise ValueError(f"GGUF version {version} is too old (transformers reads version 2 and 3)")
            n_tensors, n_kv = r.unpack("<QQ")
            metadata: dict[str, Any] = {}
            for _ in range(n_kv):
                key = r.string()
                (vtype,) = r.unpack("<I")
                metadata[key] = r.value(vtype)
            types: dict[str, int] = {}
            params, has_output = 0, False
            for _ in range(n_tensors):
                name = r.string()
                (n_dims,) = r.unpack("<I")
                dims = r.unpack(f"<{n_dims}Q")
                ttype, _offset = r.unpack("<IQ")
                tname = GGML_TYPES.get(ttype, f"type {ttype}")
                types[tname] = types.get(tname, 0) + 1
                count = 1
                for d in dims:
                    count *= d
                params += count
                has_output = has_output or name == "output.weight"
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise GrpoError(f"cannot read the GGUF file {path}: {exc}", where=str(path),
                        fix="Check that the file is a complete GGUF model (an interrupted download leaves a "
                            "truncated file).") from None
    arch = metadata.get("general.architecture")
    return GgufInfo(path, str(arch or "unknown"), metadata, types, params, has_output)


# ---------------------------------------------------------------------------- the converted-model cache


def cache_root() -> Path:
    """$GRPO_CACHE_DIR/gguf, default ~/.cache/grpo/gguf."""
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "grpo")
    return Path(base) / "gguf"


def file_sha256(path: Path) -> str:
    """The file's SHA-256, remembered per (path, size, mtime) so a second load does not re-read a large file."""
    st = path.stat()
    memo = cache_root() / "hashes.json"
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return str(known[key])
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    value = digest.hexdigest()
    known = known if isinstance(known, dict) else {}
    known[key] = value
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache still works, it only hashes again next time
    return value


def converted_dir(path: Path) -> Path:
    """Where the conversion of `path` lives (whether or not it exists yet)."""
    return cache_root() / f"{path.stem}-{file_sha256(path)[:16]}"


def cached_conversion(path: Path) -> Path | None:
    """The converted directory when a complete conversion exists, else None (never converts)."""
    target = converted_dir(path)
    return target if (target / MARKER).is_file() else None


def _quiet_conversion_bar() -> Callable[[], None]:
    """Silence transformers' own per-tensor conversion bar when stderr is not a terminal (it ignores the hf
    progress-bar switch, and piped it is one long line of carriage returns); returns the undo."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    if sys.stderr.isatty() or not hasattr(gguf_utils, "tqdm"):
        return lambda: None
    original = gguf_utils.tqdm
    gguf_utils.tqdm = partial(original, disable=True)
    return lambda: setattr(gguf_utils, "tqdm", original)


def materialize(path: Path, *, where: str = "model.name_or_path") -> Path:
    """The safetensors model directory for GGUF file `path`, converting it once (locked against a parallel run)."""
    import fcntl

    if not path.is_file():
        raise GrpoError(f"GGUF file {path} not found", where=where, fix="Check the path or install the package "
                        "that ships it.")
    info = read_header(path)
    why = info.unsupported()
    if why:
        raise GrpoError(f"{path.name} cannot be loaded: {'; '.join(why)}", where=where,
                        fix="Use a GGUF of a supported architecture with F16/BF16/Q4_K/Q8_0-style tensors, or the "
                            "model's safetensors checkpoint.")
    target = converted_dir(path)
    if (target / MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / MARKER).is_file():
            _convert(path, info, target, where)
    return target


def _convert(path: Path, info: GgufInfo, target: Path, where: str) -> None:
    import shutil
    import time

    try:
        import gguf  # noqa: F401
    except ImportError:
        raise GrpoError(f"loading {path.name} needs the `gguf` package, which is not installed", where=where,
                        fix="pip install gguf   (or: pip install 'grpo-cli[gguf]')") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    print(f"grpo: converting {path.name} ({info.quantization}) to a safetensors model once; cached in {target}",
          file=sys.stderr, flush=True)
    start = time.monotonic()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    quiet_bar = _quiet_conversion_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        # transformers marks a GGUF-loaded model as quantised and refuses to save it; its weights are already
        # dequantised float32, so drop the marks and save an ordinary checkpoint.
        model.hf_quantizer = None  # type: ignore[assignment]
        model.is_quantized = False  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.name_or_path = str(path)
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    except (OSError, ValueError, RuntimeError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise GrpoError(f"cannot convert {path.name}: {str(exc).splitlines()[0]}", where=where,
                        fix="Check that transformers and gguf are current (`pip install -U transformers gguf`), "
                            "or use the model's safetensors checkpoint.") from None
    finally:
        quiet_bar()
        if was:
            hf_logging.enable_progress_bar()
    record = {"source": str(path), "sha256": file_sha256(path), "architecture": info.architecture,
              "quantization": info.quantization, "parameters": info.parameters,
              "seconds": round(time.monotonic() - start, 1)}
    (tmp / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    print(f"grpo: converted {path.name} in {record['seconds']} s", file=sys.stderr, flush=True)


def conversion_record(model_dir: Path) -> dict[str, Any] | None:
    """What a converted directory was made from (its marker), or None for an ordinary model directory."""
    try:
        data = json.loads((model_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
