"""Models: the recipe's policy (model, tokenizer, LoRA, quantization) and any model a user points at.

- loading.py: recipe -> policy model/tokenizer/peft config (what `grpo train` trains); any source's tokenizer
  or processor, with the recipe's chat template and pad token when one is given (`load_tokenizer_for`).
- sources.py: a reference from the command line or a run (hub id, model dir, LoRA adapter, run dir,
  checkpoint-N) -> what to load, without loading it; then loading it.
- vision.py: vision-language detection, processors, LoRA/freezing aimed at the language model.
What a run is turned into afterwards (a merged model, a GGUF file, the model card, `grpo push`) is in
grpo_cli.artefacts, which imports this package; nothing here imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.models.loading import (
        LoadedModel,
        load_model,
        load_tokenizer,
        load_tokenizer_for,
        model_reference,
        record_base_reference,
        resolve_dtype,
        source_reference,
    )
    from grpo_cli.models.sources import ModelSource, load_source_model, resolve_model_source

__all__ = [
    "LoadedModel", "ModelSource", "load_model", "load_source_model", "load_tokenizer",
    "load_tokenizer_for", "model_reference", "record_base_reference", "resolve_dtype",
    "resolve_model_source", "source_reference",
]

__getattr__ = lazy_exports(__name__)
