"""Say what a model reference is before loading it: hub id, model dir, LoRA adapter, run dir or checkpoint.

`grpo eval` and `grpo merge` both accept "whatever training left behind"; classifying it once here
keeps the two commands agreeing on where the weights, the base model and the tokenizer come from.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.gguf.cache import conversion_record, materialize
from grpo_cli.model_files import read_json_object
from grpo_cli.models.vision import is_vision_language
from grpo_cli.paths import ASSETS_DIR, BUNDLED_PREFIX, check_hub_access, is_gguf_reference, is_hub_id, resolve

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class ModelSource:
    """Where the pieces of a model come from."""

    reference: str
    """What the user gave."""
    kind: str
    """hub, model, gguf, adapter, run or checkpoint."""
    weights: str
    """Full weights to load with from_pretrained: the model itself, or the base of an adapter."""
    adapter: Path | None = None
    """Directory holding adapter_config.json, when the weights are a LoRA adapter over `weights`."""
    tokenizer: str = ""
    """Where to load the tokenizer from (the run's saved tokenizer when there is one)."""
    run_dir: Path | None = None
    """The grpo output dir this came from (holds recipe.yaml), if any."""
    step: int | None = None
    """Training step of a checkpoint dir."""
    base_reference: str = ""
    """The adapter's base as the user or its adapter_config.json names it (`weights` may be a cache dir)."""
    local: Path | None = None
    """The local directory the reference named, found once here (None for a hub id); a GGUF file's is its
    converted safetensors directory."""

    @property
    def label(self) -> str:
        """A short name for tables: the directory name or the hub id."""
        path = Path(self.reference.rstrip("/"))
        if self.kind == "checkpoint" and self.run_dir is not None:
            return f"{self.run_dir.name}/{path.name}"
        return self.reference if self.kind == "hub" else path.name or self.reference

    def describe(self) -> str:
        """One line for the console: what is loaded from where."""
        what = {"hub": "hub model", "model": "model dir", "gguf": "GGUF file, converted to safetensors",
                "adapter": "LoRA adapter", "run": "grpo run", "checkpoint": f"checkpoint (step {self.step})"}[self.kind]
        if self.kind == "model" and self.reference.startswith(BUNDLED_PREFIX):
            what = "bundled with grpo"
        if self.adapter is not None:
            return f"{self.reference} ({what}, adapter over base {self.base_reference or self.weights})"
        return f"{self.reference} ({what})"

    def run_recipe(self) -> dict[str, Any] | None:
        """The resolved recipe saved by `grpo train` next to this model, if any."""
        return _read_yaml(self.run_dir / runs.RECIPE) if self.run_dir is not None else None


def _has_tokenizer(path: Path) -> bool:
    return any((path / name).exists() for name in TOKENIZER_FILES)


def local_path(ref: str, base_dir: Path | None = None) -> Path | None:
    """The existing local path `ref` names under grpo_cli.paths' rule, resolved, or None; a GGUF file is its
    converted safetensors directory (converted on first use)."""
    path = resolve(ref, base_dir)
    if path.is_file() and is_gguf_reference(str(path)):
        return materialize(path, where=ref).resolve()
    return path.resolve() if path.exists() else None


def read_json(path: Path) -> dict[str, Any]:
    """A model's or adapter's JSON file (config.json, adapter_config.json), through the one checked reader."""
    return read_json_object(path, what="the file", where=str(path.parent),
                            fix="The file is damaged; re-save the model or adapter.")


def _find_base(adapter_dir: Path, run_dir: Path | None, override: str | None, where: str) -> tuple[str, str]:
    """The base model of an adapter (what to load, and its name as given): --base, else adapter_config.json,
    else the run's recipe."""
    if override:
        found = local_path(override)
        if found is not None and not found.exists():
            raise GrpoError(f"base model {override} not found", where="--model" if where == "--adapter" else "--base",
                            fix="Give the model directory or hub id the adapter was trained on.")
        return (str(found) if found is not None else override), override
    saved = str(read_json(adapter_dir / "adapter_config.json").get("base_model_name_or_path") or "")
    candidates: list[str] = []
    if saved:
        candidates.append(saved)
        bundled = _bundled_twin(saved)
        if bundled:
            candidates.append(bundled)
    if run_dir is not None:
        ref = ((_read_yaml(run_dir / runs.RECIPE) or {}).get("model") or {}).get("name_or_path")
        if isinstance(ref, str):
            candidates.append(ref)
    for cand in candidates:
        found = local_path(cand, run_dir)
        if found is not None and found.exists():
            in_assets = found.parent == ASSETS_DIR.resolve()
            return str(found), f"{BUNDLED_PREFIX}{found.name}" if in_assets else cand
        if found is None and is_hub_id(cand):
            return cand, cand
    named = saved or "nothing (adapter_config.json has no base_model_name_or_path)"
    raise GrpoError(f"the base model of the adapter in {adapter_dir} cannot be found: it names {named}",
                    where=where, fix="Pass the base explicitly with `--base ID|DIR` (for `grpo eval`: "
                    "`--model BASE --adapter DIR`).")


def _bundled_twin(saved: str) -> str | None:
    """A bundled asset saved as an absolute path that moved (reinstall, other machine): find it by name."""
    parts = Path(saved).parts
    if "assets" in parts and (ASSETS_DIR / Path(saved).name).is_dir():
        return str(ASSETS_DIR / Path(saved).name)
    return None


def _read_yaml(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def resolve_model_source(ref: str, *, base: str | None = None, adapter: str | None = None,
                         base_dir: Path | None = None, where: str = "--model") -> ModelSource:
    """Classify `ref` (optionally with an explicit `adapter` dir on top of it) without loading weights."""
    if adapter:
        found = local_path(adapter, base_dir)
        if found is not None and found.is_dir() and not (found / "adapter_config.json").exists():
            raise GrpoError(f"{adapter} holds no LoRA adapter (no adapter_config.json)", where="--adapter",
                            fix="Point --adapter at a LoRA output dir or checkpoint; give a full model as --model.")
        return resolve_model_source(adapter, base=base or ref, base_dir=base_dir, where="--adapter")
    path = local_path(ref, base_dir)
    if path is not None and is_gguf_reference(ref) and conversion_record(path) is not None:
        return ModelSource(ref, "gguf", str(path), tokenizer=str(path), local=path)
    if path is None:
        parent = Path(ref).parent
        if not is_hub_id(ref) or (str(parent) != "." and parent.is_dir()):
            raise GrpoError(f"model {ref} not found", where=where,
                            fix="Give an existing directory (a model, a grpo output dir, a checkpoint) or a hub id.")
        return ModelSource(ref, "hub", ref, tokenizer=ref)
    if not path.exists():
        raise GrpoError(f"model directory {path} does not exist", where=where,
                        fix="Check the path; `grpo train` writes its run to output.dir.")
    if not path.is_dir():
        raise GrpoError(f"{path} is a file, not a model directory", where=where,
                        fix="Give the directory that holds config.json or adapter_config.json.")
    step = runs.checkpoint_step(path)
    in_run = step is not None and runs.is_run_dir(path.parent)
    run_dir = path if runs.is_run_dir(path) else (path.parent if in_run else None)
    kind = "checkpoint" if step is not None else "run" if run_dir is not None else "model"
    tokenizer_dir = next((d for d in (path, run_dir) if d is not None and _has_tokenizer(d)), None)
    if (path / "adapter_config.json").exists():
        base_ref, base_name = _find_base(path, run_dir, base, where)
        kind = kind if kind != "model" else "adapter"
        return ModelSource(ref, kind, base_ref, path, str(tokenizer_dir or base_ref), run_dir, step, base_name, path)
    if (path / "config.json").exists():
        return ModelSource(ref, kind, str(path), None, str(tokenizer_dir or path), run_dir, step, local=path)
    hint = "Give a directory holding config.json (a model) or adapter_config.json (a LoRA adapter)."
    if kind == "run":
        ckpt = runs.latest_checkpoint(path)
        hint = (f"The run did not finish; evaluate its latest checkpoint instead: {ckpt}." if ckpt
                else "The run saved no model yet (it may still be training or have failed).")
    raise GrpoError(f"{path} holds no model: neither config.json nor adapter_config.json", where=where, fix=hint)


def quantization_of(weights: str) -> str | None:
    """The quantization method recorded in a model's config.json (bitsandbytes, gptq, awq, ...), if any."""
    path = local_path(weights)
    if path is not None:
        config = read_json(path / "config.json") if (path / "config.json").exists() else {}
    else:
        try:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(weights).to_dict()
        except (OSError, ValueError):
            return None
    quant = config.get("quantization_config")
    if not quant:
        return None
    if isinstance(quant, dict):
        method = str(quant.get("quant_method") or "quantized")
        bits = "4bit" if quant.get("load_in_4bit") else "8bit" if quant.get("load_in_8bit") else ""
        return f"{method} {bits}".strip()
    return "quantized"


def saved_dtype(weights: str) -> str | None:
    """The dtype a model was saved in (config.json `dtype` / `torch_dtype`), if recorded."""
    path = local_path(weights)
    if path is None or not (path / "config.json").exists():
        return None
    config = read_json(path / "config.json")
    value = config.get("dtype") or config.get("torch_dtype")
    return value if value in ("float32", "float16", "bfloat16") else None


@contextmanager
def quiet_loading() -> Iterator[None]:
    """No per-file progress bars while grpo loads models for eval/merge (it prints its own lines)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def damaged_weights_error(ref: str, exc: Exception, where: str) -> GrpoError:
    """The paragraph for weights safetensors cannot read (a truncated copy or download, a corrupt header)."""
    files = sorted(p.name for p in Path(ref).glob("*.safetensors")) if Path(ref).is_dir() else []
    record = conversion_record(Path(ref)) if Path(ref).is_dir() else None
    fix = ("Copy or download the weights again (an interrupted copy leaves a truncated file).") if record is None \
        else (f"This is grpo's converted copy of {record.get('source', 'a GGUF file')}: delete the directory {ref} "
              "and the next run converts the GGUF file again.")
    return GrpoError(f"cannot load the model {ref}: a weights file ({', '.join(files) or 'safetensors'}) is "
                     f"damaged or truncated: {str(exc).splitlines()[0]}", where=where, fix=fix)


def load_base(weights: str, *, dtype: str, device: str = "cpu", revision: str | None = None,
              trust_remote_code: bool = False, where: str = "--model") -> Any:
    """Full weights through plain transformers, with a one-paragraph error when they cannot be loaded."""
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    check_hub_access(weights, revision, where)
    auto_class = AutoModelForImageTextToText if is_vision_language("auto", weights, revision) else AutoModelForCausalLM
    try:
        with quiet_loading():
            model = auto_class.from_pretrained(weights, dtype=getattr(torch, dtype), revision=revision,
                                                         trust_remote_code=trust_remote_code)
    except SafetensorError as exc:
        raise damaged_weights_error(weights, exc, where) from None
    except (OSError, ValueError) as exc:
        raise GrpoError(f"cannot load the model {weights}: {str(exc).splitlines()[0]}", where=where,
                        fix="Check the id or directory; without network access give a local directory.") from None
    return model.to(device)  # type: ignore[arg-type]  # transformers types `to` for a model, not a device


def attach_adapter(base: Any, source: ModelSource, where: str = "--model") -> Any:
    """Wrap `base` with the LoRA adapter of `source` (unmerged), refusing an adapter that does not fit."""
    from peft import PeftModel
    from peft.utils import get_peft_model_state_dict
    from safetensors import safe_open

    assert source.adapter is not None
    fix = (f"Pass the model the adapter was trained on with --base (adapter_config.json names "
           f"{read_json(source.adapter / 'adapter_config.json').get('base_model_name_or_path')}).")
    try:
        with quiet_loading():
            model = PeftModel.from_pretrained(base, str(source.adapter), is_trainable=False)
    except (RuntimeError, ValueError, KeyError) as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if "mismatch" in ln or "not found" in ln),
                     str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise GrpoError(f"the adapter in {source.adapter} does not fit the base model {source.weights}: {first}",
                        where=where, fix=fix) from None
    weights = source.adapter / "adapter_model.safetensors"
    if weights.exists():
        with safe_open(str(weights), "pt") as f:
            saved = set(f.keys())
        with warnings.catch_warnings():  # peft looks for the base's config under its saved path; irrelevant here
            warnings.simplefilter("ignore")
            missing = saved - set(get_peft_model_state_dict(model).keys())
        if missing:
            raise GrpoError(f"the adapter in {source.adapter} does not fit the base model {source.weights}: "
                            f"{len(missing)} of its {len(saved)} tensors have no place in it "
                            f"(e.g. {sorted(missing)[0]})", where=where, fix=fix)
    model.eval()
    return model


def load_source_model(source: ModelSource, *, dtype: str, device: str = "cpu", revision: str | None = None,
                      trust_remote_code: bool = False, where: str = "--model") -> Any:
    """The model `source` names, ready for generation: full weights, or base + adapter (not merged,
    so scores match what training measured on the same adapter)."""
    hub_revision = revision if local_path(source.weights) is None else None
    base = load_base(source.weights, dtype=dtype, device=device, revision=hub_revision,
                     trust_remote_code=trust_remote_code, where=where)
    return attach_adapter(base, source, where) if source.adapter is not None else base.eval()
