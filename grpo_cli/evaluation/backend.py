"""Which sampler `grpo eval` uses: transformers `generate`, or vLLM's offline engine when asked or available."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError

if TYPE_CHECKING:
    from grpo_cli.evaluation.sampling_vllm import Sampler
    from grpo_cli.evaluation.scoring import EvalSettings
    from grpo_cli.models.sources import ModelSource

BACKENDS = ("auto", "transformers", "vllm")


def check_backend(backend: str, *, images: bool = False, tools: bool = False, profile: str = "single") -> bool:
    """Validate --backend before any model loads; True when vLLM will be used."""
    from grpo_cli.evaluation.sampling_vllm import vllm_available, vllm_usable

    if backend not in BACKENDS:
        raise GrpoError(f"unknown backend {backend!r}", where="--backend", fix="Use auto, transformers or vllm.")
    if tools and backend == "vllm":
        raise GrpoError("--backend vllm does not run multi-turn tool episodes", where="--backend",
                        fix="Use --backend transformers (the default for recipes with tools).")
    if images and backend == "vllm":
        raise GrpoError("grpo eval's vLLM backend does not pass images yet", where="--backend",
                        fix="Use --backend transformers (the default picks it for image rows).")
    if backend == "vllm" and not vllm_usable():
        raise GrpoError("--backend vllm needs vLLM with a CUDA GPU, or vLLM's CPU build", where="--backend",
                        fix="pip install 'grpo-cli[vllm]' on a GPU machine, or build the CPU environment with "
                            "scripts/install_vllm_cpu.sh (see docs/distributed.md), or use --backend transformers.")
    return not images and not tools and (backend == "vllm" or (backend == "auto" and vllm_available(profile)))


@dataclass
class Loaded:
    """The model being sampled: transformers' model, or vLLM's sampler (one of them)."""

    model: Any = None
    """transformers' model (theirs, untyped to us)."""
    sampler: Sampler | None = None


@contextlib.contextmanager
def one_model(source: ModelSource, tokenizer: Any, settings: EvalSettings, *, use_vllm: bool, dtype: str, device: str,
              trust_remote_code: bool = False, revision: str | None = None) -> Iterator[Loaded]:
    """`source` loaded for sampling (vLLM's engine or transformers' model) and freed afterwards, so an evaluation
    of several models (`grpo eval`, a recipe's or a suite's) holds one of them in memory at a time."""
    import gc

    from grpo_cli.evaluation.sampling_vllm import vllm_sampler
    from grpo_cli.models.sources import load_source_model

    loaded, close = Loaded(), None
    if use_vllm:
        loaded.sampler, close = vllm_sampler(source, tokenizer, settings, dtype, trust_remote_code)
    else:
        loaded.model = load_source_model(source, dtype=dtype, device=device, revision=revision,
                                         trust_remote_code=trust_remote_code)
    try:
        yield loaded
    finally:
        if close is not None:
            close()
        loaded.model = None
        gc.collect()
