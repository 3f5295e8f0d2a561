"""`grpo export DIR --gguf`: a merged Llama or Qwen2 model written as one GGUF file for llama.cpp and Ollama.

Written with the `gguf` package as llama.cpp's converter lays it out (tensor names from gguf's own map, Llama's
Q and K rows permuted for its rotary layout, the byte-level BPE vocabulary, merges, special tokens and the chat
template), then trusted only after it is read back through grpo's own GGUF loader (`gguf.cache.materialize`,
transformers' GGUF conversion) and its logits agree with the source model's on fixed probes.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli.artefacts.card import GGUF_RECORD, refresh_gguf_section
from grpo_cli.artefacts.export_source import ARCHS, ExportSource, check_target, default_target, read_source
from grpo_cli.artefacts.merge import probe_inputs, probe_logits
from grpo_cli.errors import GrpoError
from grpo_cli.gguf.cache import materialize, record_source
from grpo_cli.models.sources import quiet_loading
from grpo_cli.paths import check_writable_dir, terminate_as_interrupt, write_atomic
from grpo_cli.runs import pid_alive

TYPES = ("f16", "q8_0")
# Largest logit difference accepted, relative to the largest logit (at least 1): float16 rounding, and Q8_0's
# per-block int8 (measured on SmolLM2-135M: f16 about 2e-3, q8_0 about 3e-2).
TOLERANCE = {"f16": 1e-2, "q8_0": 1e-1}


@dataclass
class GgufExport:
    """The file written and how closely it reproduces the source model."""

    path: Path
    source: Path
    kind: str
    max_diff: float
    tolerance: float
    tokens_match: bool
    converted: Path
    note: str | None = None
    """Why the model dir does not record the export (it could not be written), if so."""


def _metadata(writer: Any, config: dict[str, Any]) -> None:
    heads = config["num_attention_heads"]
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads") or heads)
    writer.add_rope_freq_base(float(config.get("rope_theta") or (config.get("rope_parameters") or {}).get(
        "rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(config.get("head_dim") or config["hidden_size"] // heads)


def _tokenizer(writer: Any, source: ExportSource) -> None:
    """The byte-level BPE vocabulary and merges, special tokens and chat template, as llama.cpp reads them."""
    from transformers import AutoTokenizer

    data, vocab_size = source.tokenizer, int(source.config["vocab_size"])
    model = data["model"]  # read_source checked: a BPE model with a vocabulary table
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [5] * vocab_size  # UNUSED, for ids the vocabulary leaves empty
    for token, index in model["vocab"].items():
        if isinstance(index, int) and 0 <= index < vocab_size:
            tokens[index], types[index] = str(token), 1  # NORMAL
    for added in data.get("added_tokens") or []:
        index = added.get("id") if isinstance(added, dict) else None
        if isinstance(index, int) and 0 <= index < vocab_size:
            tokens[index], types[index] = str(added.get("content")), 3 if added.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(map(str, m)) for m in model.get("merges") or []]
    try:
        tok = AutoTokenizer.from_pretrained(str(source.directory))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise GrpoError(f"the tokenizer in {source.directory} cannot be loaded: {_first_line(exc)}",
                        where="DIR", fix="Re-save it with tokenizer.save_pretrained(DIR); tokenizer_config.json "
                                         "and tokenizer.json must be the tokenizer's own.") from None
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if source.model_type == "qwen2" else _pre(data))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if merges:
        writer.add_token_merges(merges)
    else:  # a character-level vocabulary (the bundled tiny models): the reader derives merges from scores
        writer.add_token_scores([float(-i) for i in range(vocab_size)])
    for name in ("bos", "eos", "unk", "pad"):
        value = getattr(tok, f"{name}_token_id", None)
        if isinstance(value, int):
            getattr(writer, f"add_{name}_token_id")(value)
    writer.add_add_bos_token(False)
    if isinstance(getattr(tok, "chat_template", None), str):
        writer.add_chat_template(tok.chat_template)


def _pre(data: dict[str, Any]) -> str:
    """llama.cpp's name for the pre-tokenizer split (the one transformers' reader maps back), else `default`."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    text = json.dumps(data.get("pre_tokenizer") or {})
    return next((name for name, regex in GGUF_PRE_TOKENIZER_SPLITS.items() if json.dumps(regex)[1:-1] in text),
                "default")


def _permute(weights: Any, heads: int) -> Any:
    """llama.cpp's rotary layout for Llama's Q and K rows (transformers' reader undoes it)."""
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def _tensors(writer: Any, source: ExportSource, kind: str) -> None:
    """Every weights file's tensors; a file changed since `read_source` checked it, or a shape config.json
    disagrees with, is one paragraph."""
    from safetensors import SafetensorError

    for file in source.weights:
        try:
            _file_tensors(writer, source, file, kind)
        except (SafetensorError, OSError, ValueError) as exc:
            raise GrpoError(f"cannot convert {file}: {_first_line(exc)}", where="DIR",
                            fix="Check that config.json belongs to these weights and that the files are whole; "
                                "re-save the model if not.") from None


def _file_tensors(writer: Any, source: ExportSource, file: Path, kind: str) -> None:
    import gguf
    import numpy as np
    from safetensors import safe_open

    config = source.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[ARCHS[source.model_type]], config["num_hidden_layers"])
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    tied = config.get("tie_word_embeddings", False)
    with safe_open(str(file), framework="pt") as handle:
        for key in handle.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
            name = names.get_name(key, try_suffixes=(".weight", ".bias"))
            if name is None:
                raise GrpoError(f"{file.name}: tensor {key} has no GGUF name", where="DIR",
                                fix="The model is not a plain Llama/Qwen2 checkpoint; export it with llama.cpp.")
            if tied and name == "output.weight":
                continue
            data = handle.get_tensor(key).float().numpy()
            if source.model_type == "llama" and key.endswith(("q_proj.weight", "k_proj.weight")):
                data = _permute(data, heads if "q_proj" in key else kv)
            _add(writer, name, data, kind, np, gguf)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _add(writer: Any, name: str, data: Any, kind: str, np: Any, gguf: Any) -> None:
    """Vectors stay float32 (as llama.cpp keeps norms); matrices become F16 or Q8_0."""
    if data.ndim == 1:
        writer.add_tensor(name, data.astype(np.float32))
    elif kind == "q8_0" and data.shape[-1] % 32 == 0:
        quant = gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor(name, gguf.quants.quantize(data.astype(np.float32), quant), raw_dtype=quant)
    else:
        writer.add_tensor(name, data.astype(np.float16))


def write_gguf(source: ExportSource, out: Path, kind: str) -> None:
    """Write `out` from the model read in `source` (export_gguf writes it into a private directory first)."""
    import gguf

    writer = gguf.GGUFWriter(str(out), source.model_type)
    writer.add_name(source.directory.resolve().name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if kind == "q8_0" else gguf.LlamaFileType.MOSTLY_F16)
    try:
        _metadata(writer, source.config)
    except (ValueError, TypeError, OverflowError, struct.error) as exc:
        raise GrpoError(f"{source.directory / 'config.json'} holds a value the GGUF header cannot store: {exc}",
                        where="DIR", fix="Correct that value (a number where config.json has text or a list), or "
                                         "re-save the model.") from None
    _tokenizer(writer, source)
    _tensors(writer, source, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


PROBE_TEXTS = ("What is 12 times 7? Think step by step.", "<|im_start|>user\nHello!<|im_end|>\n", "naïve café — 42")


def verify_gguf(model_dir: Path, path: Path, kind: str) -> tuple[float, float, bool, Path]:
    """Read `path` back through grpo's GGUF loader and compare logits and token ids with the source model:
    (largest logit difference, the tolerance it had to meet, whether the tokenizers agree, the converted dir)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted = materialize(path, where="--out")
    with quiet_loading():
        source_tok, back_tok = AutoTokenizer.from_pretrained(str(model_dir)), AutoTokenizer.from_pretrained(
            str(converted))
        source = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        back = AutoModelForCausalLM.from_pretrained(str(converted), dtype=torch.float32)
    same = all(source_tok(t)["input_ids"] == back_tok(t)["input_ids"] for t in PROBE_TEXTS)
    probes = probe_inputs(source_tok, int(source.config.vocab_size))
    a, b = probe_logits(source, probes), probe_logits(back, probes)
    diff = max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))
    scale = max(1.0, max(float(x.abs().max()) for x in a))
    return diff, TOLERANCE[kind] * scale, same, converted


def export_gguf(model_dir: str | Path, out: str | Path | None = None, *, kind: str = "f16",
                force: bool = False) -> GgufExport:
    """Write and verify a GGUF of the model in `model_dir` (default `DIR/<name>-<type>.gguf`). Everything that
    can be refused is refused before a byte is written; `--out` never lands on the model's own files."""
    directory = Path(model_dir).expanduser()
    if kind not in TYPES:
        raise GrpoError(f"unknown GGUF type {kind!r}", where="--type", fix=f"Use one of {', '.join(TYPES)}.")
    source = read_source(directory)
    target = Path(out).expanduser() if out else default_target(directory, kind)
    check_target(directory, target, force)
    check_writable_dir(target.parent, "--out")  # before minutes of conversion, not at the final rename
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise GrpoError("writing GGUF needs the `gguf` package, which is not installed here", where="--gguf",
                        fix="pip install gguf   (or pip install 'grpo-cli[gguf]')")
    diff, tolerance, same, converted = _write_verified(source, target, kind)
    note = _record(directory, target, kind, diff, tolerance)
    return GgufExport(target, directory, kind, diff, tolerance, same, converted, note)


def _write_verified(source: ExportSource, target: Path, kind: str) -> tuple[float, float, bool, Path]:
    """Write into a private directory beside `target`, read it back there, and only then rename it over `target`:
    Ctrl-C, SIGTERM or a failed check leaves neither a half file nor an unverified one, and a file --force
    replaces stays as it was until its replacement passed. (Same name, same bytes: the conversion cached while
    checking is the one a later load of `target` finds.)"""
    import shutil

    _remove_stale_staging(target)
    staging = target.parent / f".{target.name}.grpo-export-{os.getpid()}"
    created = [p for p in (target.parent, *target.parent.parents) if not p.exists()]  # --out in a new folder
    done = False
    with terminate_as_interrupt():
        try:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            written = staging / target.name
            write_gguf(source, written, kind)
            diff, tolerance, same, converted = verify_gguf(source.directory, written, kind)
            if not diff <= tolerance or not same:
                raise _not_reproduced(source.directory, kind, diff, tolerance, same)
            os.replace(written, target)
            record_source(converted, target.resolve())
            done = True
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            for made in created if not done else ():  # deepest first: the folders this export made, if empty
                with contextlib.suppress(OSError):
                    made.rmdir()
    return diff, tolerance, same, converted


def _remove_stale_staging(target: Path) -> None:
    """Staging directories of exports to this file whose process is gone (SIGKILL leaves a model-sized file)."""
    import shutil

    for stale in target.parent.glob(f".{target.name}.grpo-export-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if stale.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _not_reproduced(source: Path, kind: str, diff: float, tolerance: float, same: bool) -> GrpoError:
    what = (f"its logits differ from the source model's by up to {diff:.3g} (tolerance {tolerance:.3g})"
            if same else "its tokenizer splits the probe texts differently from the source model's (a "
            "tokenizer without BPE merges, like the bundled tiny models', has no GGUF form that reads back "
            "the same)")
    fix = ("Try --type f16; if it persists, " if same and kind != "f16" else "") + \
        "export with llama.cpp's convert_hf_to_gguf.py."
    return GrpoError(f"the GGUF read back does not reproduce the model: {what}; nothing was kept",
                     where=str(source), fix=fix[0].upper() + fix[1:])


def _record(source: Path, target: Path, kind: str, diff: float, tolerance: float) -> str | None:
    """grpo_gguf.json in the model dir: each verified export, which the model card lists. The GGUF is written
    and verified by now, so a model dir that cannot take the record (read-only) is a note, not a failure."""
    record = source / GGUF_RECORD
    try:
        entries = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else []
    except (OSError, ValueError):
        entries = []
    entries = [e for e in entries if isinstance(e, dict) and e.get("file") != target.name] \
        if isinstance(entries, list) else []
    entries.append({"file": target.name, "type": kind, "max_logit_diff": diff, "tolerance": tolerance,
                    "in_model_dir": target.parent.resolve() == source.resolve()})
    try:
        write_atomic(record, json.dumps(entries, indent=2) + "\n")
        refresh_gguf_section(source)
    except OSError as exc:
        return (f"the export is not recorded in {source} ({GGUF_RECORD} and the model card's GGUF section): "
                f"{exc.strerror or exc}; the GGUF file itself is whole and verified")
    return None
