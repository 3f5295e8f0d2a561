"""GGUF files as model sources: read the header without dequantising, convert once to a safetensors cache.

A `.gguf` reference (a path, or `package:NAME/FILE.gguf` for a file shipped inside an installed Python package)
names a llama.cpp model file. `grpo validate` and `grpo memory` read its shape and quantisation from the header
alone (a small parser here: no numpy, no torch). Everything that loads weights asks `cache.materialize()`, which
dequantises the file once with transformers + `gguf` and saves an ordinary safetensors model directory (config,
weights, tokenizer, chat template) in the cache, keyed by the file's SHA-256; every later load reads that directory.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO

from grpo_cli.errors import GrpoError

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
_REQUIRED_SHAPE = ("embedding_length", "block_count", "attention.head_count")
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
        return out + self.incomplete()

    def incomplete(self) -> list[str]:
        """What a model file needs and this header lacks: tensors, the shape keys transformers builds the config
        from, a tokenizer (a header-only or hand-made file otherwise validates as a 0.0M-parameter model)."""
        out = []
        if not self.parameters:
            out.append("the file holds no tensors")
        missing = [f"{self.architecture}.{k}" for k in _REQUIRED_SHAPE if f"{self.architecture}.{k}" not in
                   self.metadata]
        if missing:
            out.append(f"its header lacks {', '.join(missing)}, which transformers builds the model's config from")
        if "tokenizer.ggml.model" not in self.metadata:
            out.append("it carries no tokenizer (tokenizer.ggml.model)")
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
        self.base = 0  # the file offset of buf[0]
        self.size = os.fstat(f.fileno()).st_size

    @property
    def offset(self) -> int:
        """Where in the file the next field starts."""
        return self.base + self.pos

    def need(self, n: int) -> None:
        if self.base + self.pos + n > self.size:  # a length field past the end (damaged): never try to read it
            raise ValueError("the file ends inside its header (truncated, or a length field is damaged)")
        if self.pos + n > len(self.buf):
            more = self.f.read(max(n, 1 << 22))
            if not more:
                raise ValueError("the file ends inside its header (truncated)")
            self.base += self.pos
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


# ggml type -> (elements per block, bytes per block), as gguf.constants.GGML_QUANT_SIZES (a test holds them equal).
TYPE_SIZES = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "F64": (1, 8), "I8": (1, 1), "I16": (1, 2),
              "I32": (1, 4), "I64": (1, 8), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
              "Q8_0": (32, 34), "Q8_1": (32, 40), "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144),
              "Q5_K": (256, 176), "Q6_K": (256, 210), "Q8_K": (256, 292), "IQ2_XXS": (256, 66), "IQ2_XS": (256, 74),
              "IQ3_XXS": (256, 98), "IQ1_S": (256, 50), "IQ4_NL": (32, 18), "IQ3_S": (256, 110), "IQ2_S": (256, 82),
              "IQ4_XS": (256, 136), "IQ1_M": (256, 56), "TQ1_0": (256, 54), "TQ2_0": (256, 66), "MXFP4": (32, 17),
              "NVFP4": (64, 36), "Q1_0": (128, 18)}


def _tensor_bytes(tname: str, count: int) -> int:
    """Bytes a tensor of `count` elements takes (0 for a type not in the table: only its offset is checked)."""
    block, size = TYPE_SIZES.get(tname, (1, 0))
    return -(-count // block) * size


def _check_size(f: BinaryIO, header_end: int, metadata: dict[str, Any], data_end: int) -> None:
    """A file cut after its header (an interrupted download) parses; its tensors would then be read past the end.
    The tensor data starts at the header's end, aligned to `general.alignment` (default 32)."""
    align = metadata.get("general.alignment")
    align = align if isinstance(align, int) and align > 0 else 32
    need = -(-header_end // align) * align + data_end
    size = os.fstat(f.fileno()).st_size
    if size < need:
        raise ValueError(f"the file is truncated: its tensor table needs {need:,} bytes and the file has {size:,}")


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
            params, has_output, data_end = 0, False, 0
            for _ in range(n_tensors):
                name = r.string()
                (n_dims,) = r.unpack("<I")
                dims = r.unpack(f"<{n_dims}Q")
                ttype, offset = r.unpack("<IQ")
                tname = GGML_TYPES.get(ttype, f"type {ttype}")
                types[tname] = types.get(tname, 0) + 1
                count = 1
                for d in dims:
                    count *= d
                params += count
                has_output = has_output or name == "output.weight"
                data_end = max(data_end, offset + _tensor_bytes(tname, count))
            _check_size(f, r.offset, metadata, data_end)
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise GrpoError(f"cannot read the GGUF file {path}: {exc}", where=str(path),
                        fix="Check that the file is a complete GGUF model (an interrupted download leaves a "
                            "truncated file).") from None
    arch = metadata.get("general.architecture")
    return GgufInfo(path, str(arch or "unknown"), metadata, types, params, has_output)
