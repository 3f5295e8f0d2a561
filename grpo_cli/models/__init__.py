"""Models: the recipe's policy (model, tokenizer, LoRA, quantization), any model a user points at, and merging.

- loading.py: recipe -> policy model/tokenizer/peft config (what `grpo train` trains).
- sources.py: a reference from the command line or a run (hub id, model dir, LoRA adapter, run dir,
  checkpoint-N) -> what to load, without loading it; then loading it.
- merge.py: fold a LoRA adapter into its base, verified by logits.
The model card and `grpo push` are post-run artefacts (grpo_cli.artefacts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.models.loading import (
        LoadedModel,
        load_model,
        load_tokenizer,
        model_reference,
        record_base_reference,
        resolve_dtype,
        source_reference,
    )
    from grpo_cli.models.merge import MergeResult, merge_adapter
    from grpo_cli.models.sources import ModelSource, load_source_model, load_tokenizer_for, resolve_model_source

__all__ = [
    "LoadedModel", "MergeResult", "ModelSource", "load_model", "load_source_model", "load_tokenizer",
    "load_tokenizer_for", "merge_adapter", "model_reference", "record_base_reference", "resolve_dtype",
    "resolve_model_source", "source_reference",
]

__getattr__ = lazy_exports(__name__)
