"""`grpo merge`: fold a LoRA adapter into its base and save a standalone model that needs no peft.

The merge is only trusted after it is checked: logits of base+adapter and of the merged model,
reloaded from disk with plain transformers, must agree on probe inputs. Everything is written to
a temporary sibling directory and renamed at the end, so an interrupted merge leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.artefacts.card import write_card
from grpo_cli.artefacts.publish import hub_base_id
from grpo_cli.errors import GrpoError
from grpo_cli.models.sources import (
    ModelSource,
    attach_adapter,
    load_base,
    local_path,
    quantization_of,
    quiet_loading,
    resolve_model_source,
    saved_dtype,
)
from grpo_cli.models.vision import load_processor, source_is_vision_language
from grpo_cli.paths import check_writable_dir, share_weights
from grpo_cli.runs import MERGE_INFO, WEIGHT_FILES, latest_checkpoint

if TYPE_CHECKING:
    from rich.console import Console

DTYPES = ("float32", "bfloat16", "float16")
# Largest logit difference accepted, relative to the largest logit magnitude (at least 1).
TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}
PROBE_TEXTS = ("3+5=", "The quick brown fox jumps over the lazy dog. 12*7=")


class MergeMismatch(GrpoError):
    """The merged model does not reproduce base+adapter: nothing was written (exit code 1)."""

    exit_code = 1


@dataclass
class MergeResult:
    """Where the merged model went and how closely it reproduces base+adapter."""

    out: Path
    base: str
    adapter: Path
    dtype: str
    max_diff: float
    tolerance: float
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    auto_class: str = "AutoModelForCausalLM"  # what loads the merged model (AutoModelForImageTextToText for a VLM)


def _adapter_source(ref: str, base: str | None) -> ModelSource:
    """Resolve ADAPTER_DIR, with merge-specific errors for things that hold no adapter."""
    path = local_path(ref)
    if path is None or not path.is_dir():
        raise GrpoError(f"{ref} is not a local directory", where="ADAPTER_DIR",
                        fix="Give the directory holding adapter_config.json (a LoRA run's output dir or checkpoint).")
    if not (path / "adapter_config.json").exists():
        if (path / "config.json").exists():
            fix = "It holds full model weights already (a full fine-tune): it is standalone, there is nothing to merge."
        else:
            ckpt = latest_checkpoint(path)
            has = ckpt is not None and (ckpt / "adapter_config.json").exists()
            fix = (f"The run saved no final adapter; merge its latest checkpoint: grpo merge {ckpt} --out DIR."
                   if has else "Give a LoRA output dir (trained with `model.lora`) or a checkpoint-N dir of one.")
        raise GrpoError(f"no LoRA adapter in {path} (no adapter_config.json)", where="ADAPTER_DIR", fix=fix)
    return resolve_model_source(ref, base=base, where="--base")


def _check_out(out: Path, source: ModelSource, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise GrpoError(f"{out} exists and is a file", where="--out", fix="Give a directory path.")

    check_writable_dir(out.parent, "--out")  # the merge is staged beside `out`, before any weights load
    out_r = out.resolve()
    protected = [p.resolve() for p in (source.adapter, source.run_dir) if p is not None]
    if any(out_r == p or out_r in p.parents for p in protected):
        raise GrpoError(f"--out {out} would replace the adapter being merged", where="--out",
                        fix="Write the merged model to a new directory, e.g. --out outputs/merged.")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise GrpoError(f"output directory {out} is not empty; refusing to overwrite it", where="--out",
                            fix="Choose an empty or new directory, or pass --force to replace it.")
        if not looks_like_a_model(out):
            raise GrpoError(f"{out} is not empty and does not look like a model (no config.json with weights, "
                            "no grpo_merge.json); refusing to delete it", where="--force",
                            fix="Choose an empty or new --out; --force only replaces an earlier merge or model.")


def looks_like_a_model(path: Path) -> bool:
    """A saved model or earlier merge: what `--force` may replace."""
    return (path / MERGE_INFO).is_file() or (
        (path / "config.json").is_file() and any((path / name).is_file() for name in WEIGHT_FILES))


def clean_stale_temporaries(out: Path) -> list[Path]:
    """Remove `.OUT.tmp-PID-*` / `.OUT.old-PID-*` left by merges that were killed (their PID is gone).

    A merge writes into such a sibling and renames it at the end; SIGKILL skips its cleanup. Names
    without a PID (from older versions) are removed once they are an hour old. A previous output
    moved aside by a merge killed mid-install is put back rather than deleted.
    """
    removed = []
    for kind in ("tmp", "old"):
        for path in out.parent.glob(f".{out.name}.{kind}-*"):
            pid = path.name[len(f".{out.name}.{kind}-"):].split("-", 1)[0]
            stale = not runs.pid_alive(int(pid)) if pid.isdigit() else time.time() - path.stat().st_mtime > 3600
            if not (stale and path.is_dir()):
                continue
            if kind == "old" and (path / "dir").is_dir() and not out.exists():
                os.replace(path / "dir", out)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _pick_dtype(requested: str, weights: str) -> str:
    if requested == "auto":
        return saved_dtype(weights) or "float32"
    if requested not in DTYPES:
        raise GrpoError(f"unknown dtype {requested!r}", where="--dtype", fix=f"Use auto or one of {', '.join(DTYPES)}.")
    return requested


def probe_inputs(tokenizer: Any, vocab_size: int) -> list[Any]:
    """Token-id tensors to compare logits on: real text plus seeded random ids covering the vocabulary."""
    import torch

    probes = []
    for text in PROBE_TEXTS:
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        if ids.shape[1]:
            probes.append(ids)
    gen = torch.Generator().manual_seed(0)
    probes.append(torch.randint(0, vocab_size, (2, 24), generator=gen))
    return probes


def probe_logits(model: Any, probes: list[Any]) -> list[Any]:
    import torch

    with torch.inference_mode():
        return [model(input_ids=ids.to(model.device)).logits.float().cpu() for ids in probes]


def _fold(model: Any) -> Any:
    """Merge the LoRA weights into the base weights (safe_merge refuses NaNs) and drop the peft wrapper."""
    return model.merge_and_unload(safe_merge=True)


def _max_diff(a: list[Any], b: list[Any]) -> tuple[float, float]:
    diff = max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))
    scale = max(1.0, max(float(x.abs().max()) for x in a))
    return diff, scale


def _install(tmp: Path, out: Path) -> None:
    """Put the finished tmp dir in place of `out`; the old contents go only after the new ones are in."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
        os.replace(out, old / "dir")
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _qlora_notes(source: ModelSource, dtype: str) -> list[str]:
    run_model = (source.run_recipe() or {}).get("model") or {}
    if not run_model.get("quantization"):
        return []
    return [f"the adapter was trained on a {run_model['quantization']}-quantized base; it is merged into "
            f"the full-precision {dtype} base, as is usual for QLoRA"]


def _hub_base_note(base: str) -> list[str]:
    """Ask for the base's Hub id when nothing on this machine names one (the card's `base_model` stays empty)."""
    if hub_base_id(base) is not None:
        return []
    return [f"the card names no Hub base model: {base} does not say which Hub model it is; pass "
            "`--base-model ORG/NAME` to `grpo push` so the card links it"]


def _staging_dir(out: Path) -> Path:
    """A hidden sibling of `out` to write into, renamed into place only once verified.

    Its name carries this process's id, so a later merge can tell (and remove) what a killed one left.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the final dir should look like any other
    return tmp


def _processing_class(source: ModelSource) -> tuple[Any, bool]:
    """The tokenizer to save with the merged model, or for a vision-language model its processor; and which."""
    from transformers import AutoTokenizer

    vision = source_is_vision_language(source.tokenizer, source.weights)
    try:
        if vision:  # image processor + tokenizer + chat template, saved next to the merged weights
            return load_processor(source.tokenizer or source.weights), True
        return AutoTokenizer.from_pretrained(source.tokenizer or source.weights), False
    except (OSError, ValueError) as exc:
        raise GrpoError(f"cannot load the tokenizer from {source.tokenizer}: {str(exc).splitlines()[0]}",
                        where="ADAPTER_DIR",
                        fix="Check that the adapter or base directory holds a tokenizer.") from None


def merge_adapter(ref: str, out: str | Path, *, base: str | None = None, dtype: str = "auto", force: bool = False,
                  max_shard_size: str | int = "5GB", console: Console | None = None) -> MergeResult:
    """Fold the adapter at `ref` into its base, verify logits, and save a standalone model in `out`."""
    source = _adapter_source(ref, base)  # a full fine-tune or an empty dir is refused before torch loads
    assert source.adapter is not None
    out = Path(out).expanduser()
    _check_out(out, source, force)
    quant = quantization_of(source.weights)
    if quant:
        raise GrpoError(f"the base model {source.weights} is quantized ({quant}); LoRA deltas cannot be folded "
                        "into quantized weights without losing the adapter's precision", where="--base",
                        fix="Pass --base with the original full-precision model (the one that was quantized). "
                            "A QLoRA run quantizes at load time, so its recipe's model.name_or_path is that model.")
    dtype = _pick_dtype(dtype, source.weights)
    notes = _qlora_notes(source, dtype)
    say = console.print if console is not None else (lambda *a, **k: None)
    say(f"merging {source.adapter} into {source.base_reference or source.weights} ({dtype})", markup=False)
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    tokenizer, vision = _processing_class(source)
    model = attach_adapter(load_base(source.weights, dtype=dtype, where="--base"), source, where="--base")
    probes = probe_inputs(tokenizer.tokenizer if vision else tokenizer,
                          int(model.get_input_embeddings().weight.shape[0]))
    reference = probe_logits(model, probes)

    tmp = _staging_dir(out)
    try:
        merged = _fold(model)
        del model
        with quiet_loading():
            merged.save_pretrained(str(tmp), max_shard_size=max_shard_size)
        tokenizer.save_pretrained(str(tmp))
        share_weights(tmp)
        del merged
        with quiet_loading():
            reloaded = (AutoModelForImageTextToText if vision else AutoModelForCausalLM).from_pretrained(
                str(tmp), dtype="auto")
        diff, scale = _max_diff(reference, probe_logits(reloaded, probes))
        del reloaded
        tolerance = TOLERANCE[dtype] * scale
        if not diff <= tolerance:  # also catches NaN
            raise MergeMismatch(f"verification failed: the merged model's logits differ from base+adapter by up to "
                                f"{diff:.3g} (tolerance {tolerance:.3g} for {dtype}); nothing was written",
                                where=str(source.adapter),
                                fix="Retry with --dtype float32; if it persists, the adapter uses a layer type "
                                    "that peft cannot merge exactly (e.g. DoRA on a quantized base).")
        base_ref = source.base_reference or source.weights  # `package:…gguf`, not the cache dir it converted to
        info = {"base": base_ref, "base_weights": source.weights, "adapter": str(source.adapter.resolve()),
                "run_dir": str(source.run_dir.resolve()) if source.run_dir else None, "dtype": dtype,
                "max_logit_diff": diff, "tolerance": tolerance}
        (tmp / runs.MERGE_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        write_card(tmp, run_dir=source.run_dir, base=base_ref, adapter=False, name=out.resolve().name)
        notes += _hub_base_note(base_ref)
        files = sorted(p.name for p in tmp.iterdir())
        _install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return MergeResult(out, source.weights, source.adapter, dtype, diff, tolerance, files, notes,
                       "AutoModelForImageTextToText" if vision else "AutoModelForCausalLM")
