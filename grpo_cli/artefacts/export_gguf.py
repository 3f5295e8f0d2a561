"""`grpo export DIR --gguf`: a merged Llama or Qwen2 model written as one GGUF file for llama.cpp and Ollama.

Written with the `gguf` package as llama.cpp's converter lays it out (tensor names from gguf's own map, Llama's
Q and K rows permuted for its rotary layout, the byte-level BPE vocabulary, merges, special tokens and the chat
template), then trusted only after it is read back through grpo's own GGUF loader (`gguf.cache.materialize`,
transformers' GGUF conversion) and its logits agree with the source model's on fixed probes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli.artefacts.card import GGUF_RECORD, refresh_gguf_section
from grpo_cli.artefacts.merge import probe_inputs, probe_logits
from grpo_cli.errors import GrpoError
from grpo_cli.gguf.cache import materialize
from grpo_cli.models.sources import quiet_loading
from grpo_cli.paths import check_writable_dir

TYPES = ("f16", "q8_0")
ARCHS = {"llama": "LLAMA", "qwen2": "QWEN2"}
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


def _config(model_dir: Path) -> dict[str, Any]:
    config_path = model_dir / "config.json"
    if (model_dir / "adapter_config.json").is_file() and not config_path.is_file():
        raise GrpoError(f"{model_dir} holds a LoRA adapter, not a whole model", where="DIR",
                        fix=f"Merge it first: grpo merge {model_dir} --out DIR, then grpo export DIR --gguf.")
    if not config_path.is_file():
        raise GrpoError(f"{model_dir} holds no model (no config.json)", where="DIR",
                        fix="Give a merged model or a full fine-tune's output dir.")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("model_type") not in ARCHS:
        raise GrpoError(f"{model_dir} is a {config.get('model_type')!r} model; GGUF export writes Llama and Qwen2",
                        where="DIR", fix="Use llama.cpp's convert_hf_to_gguf.py for other architectures.")
    return config


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


def _tokenizer(writer: Any, model_dir: Path, arch: str, vocab_size: int) -> None:
    """The byte-level BPE vocabulary and merges, special tokens and chat template, as llama.cpp reads them."""
    from transformers import AutoTokenizer

    data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise GrpoError(f"the tokenizer in {model_dir} is {model.get('type')!r}, not byte-level BPE", where="DIR",
                        fix="GGUF export writes byte-level BPE tokenizers (Llama 3, Qwen2, SmolLM2).")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [5] * vocab_size  # UNUSED, for ids the vocabulary leaves empty
    for token, index in model["vocab"].items():
        if index < vocab_size:
            tokens[index], types[index] = token, 1  # NORMAL
    for added in data.get("added_tokens") or []:
        if added["id"] < vocab_size:
            tokens[added["id"]], types[added["id"]] = added["content"], 3 if added.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if arch == "qwen2" else _pre(data))
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
    if getattr(tok, "chat_template", None):
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


def _tensors(writer: Any, model_dir: Path, config: dict[str, Any], kind: str) -> None:
    import gguf
    import numpy as np
    from safetensors import safe_open

    arch = gguf.MODEL_ARCH[ARCHS[config["model_type"]]]
    names = gguf.get_tensor_name_map(arch, config["num_hidden_layers"])
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    files = sorted(model_dir.glob("*.safetensors"))
    tied = config.get("tie_word_embeddings", False)
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                name = names.get_name(key, try_suffixes=(".weight", ".bias"))
                if name is None:
                    raise GrpoError(f"{file.name}: tensor {key} has no GGUF name", where="DIR",
                                    fix="The model is not a plain Llama/Qwen2 checkpoint; export it with llama.cpp.")
                if tied and name == "output.weight":
                    continue
                data = handle.get_tensor(key).float().numpy()
                if config["model_type"] == "llama" and key.endswith(("q_proj.weight", "k_proj.weight")):
                    data = _permute(data, heads if "q_proj" in key else kv)
                _add(writer, name, data, kind, np, gguf)


def _add(writer: Any, name: str, data: Any, kind: str, np: Any, gguf: Any) -> None:
    """Vectors stay float32 (as llama.cpp keeps norms); matrices become F16 or Q8_0."""
    if data.ndim == 1:
        writer.add_tensor(name, data.astype(np.float32))
    elif kind == "q8_0" and data.shape[-1] % 32 == 0:
        quant = gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor(name, gguf.quants.quantize(data.astype(np.float32), quant), raw_dtype=quant)
    else:
        writer.add_tensor(name, data.astype(np.float16))


def write_gguf(model_dir: Path, out: Path, kind: str) -> None:
    """Write `out` from the model in `model_dir` (temporary name first, renamed when complete)."""
    import gguf

    config = _config(model_dir)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), config["model_type"])
    try:
        writer.add_name(model_dir.resolve().name)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if kind == "q8_0" else gguf.LlamaFileType.MOSTLY_F16)
        _metadata(writer, config)
        _tokenizer(writer, model_dir, config["model_type"], config["vocab_size"])
        _tensors(writer, model_dir, config, kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)


PROBE_TEXTS = ("What is 12 times 7? Think step by step.", "<|im_start|>user\nHello!<|im_end|>\n", "naïve café — 42")


def verify_gguf(model_dir: Path, path: Path, kind: str) -> tuple[float, float, bool, Path]:
    """Read `path` back through grpo's GGUF loader and compare logits and token ids with the source model:
    (largest logit difference, the tolerance it had to meet, whether the tokenizers agree, the converted dir)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted = materialize(path, where=str(path))
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
    """Write and verify a GGUF of the model in `model_dir` (default `DIR/<name>-<type>.gguf`)."""
    source = Path(model_dir).expanduser()
    if kind not in TYPES:
        raise GrpoError(f"unknown GGUF type {kind!r}", where="--type", fix=f"Use one of {', '.join(TYPES)}.")
    if not source.is_dir():
        raise GrpoError(f"{source} is not a directory", where="DIR", fix="Give a merged model's directory.")
    _config(source)
    target = Path(out).expanduser() if out else source / f"{source.resolve().name}-{kind}.gguf"
    if target.is_dir():
        raise GrpoError(f"{target} is a directory", where="--out", fix="Give the path of the .gguf file to write.")
    if target.exists() and not force:
        raise GrpoError(f"{target} already exists", where="--out", fix="Choose another --out or pass --force.")

    check_writable_dir(target.parent, "--out")  # before minutes of conversion, not at the final rename
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise GrpoError("writing GGUF needs the `gguf` package, which is not installed here", where="--gguf",
                        fix="pip install gguf   (or pip install 'grpo-cli[gguf]')")
    write_gguf(source, target, kind)
    diff, tolerance, same, converted = verify_gguf(source, target, kind)
    if not diff <= tolerance or not same:
        target.unlink(missing_ok=True)
        what = (f"its logits differ from the source model's by up to {diff:.3g} (tolerance {tolerance:.3g})"
                if same else "its tokenizer splits the probe texts differently from the source model's (a "
                "tokenizer without BPE merges, like the bundled tiny models', has no GGUF form that reads back "
                "the same)")
        fix = ("Try --type f16; if it persists, " if same and kind != "f16" else "") + \
            "export with llama.cpp's convert_hf_to_gguf.py."
        raise GrpoError(f"the GGUF read back does not reproduce the model: {what}; nothing was kept",
                        where=str(source), fix=fix[0].upper() + fix[1:])
    _record(source, target, kind, diff, tolerance)
    refresh_gguf_section(source)
    return GgufExport(target, source, kind, diff, tolerance, same, converted)


def _record(source: Path, target: Path, kind: str, diff: float, tolerance: float) -> None:
    """grpo_gguf.json in the model dir: each verified export, which the model card lists."""
    record = source / GGUF_RECORD
    try:
        entries = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else []
    except ValueError:
        entries = []
    entries = [e for e in entries if isinstance(e, dict) and e.get("file") != target.name]
    entries.append({"file": target.name, "type": kind, "max_logit_diff": diff, "tolerance": tolerance,
                    "in_model_dir": target.parent.resolve() == source.resolve()})
    record.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
