"""Models: the recipe's policy (model, tokenizer, LoRA, quantization), any model a user points at, and merging.

- loading.py: recipe -> policy model/tokenizer/peft config (what `grpo train` trains).
- sources.py: a reference from the command line or a run (hub id, model dir, LoRA adapter, run dir,
  checkpoint-N) -> what to load, without loading it; then loading it.
- merge.py: fold a LoRA adapter into its base, verified by logits.
- card.py: the Hub model card (README.md) of a run or merged model; hub.py: `grpo push`.
"""

from __future__ import annotations

from grpo_cli.models.card import write_card
from grpo_cli.models.hub import push_run, stage_run
from grpo_cli.models.loading import LoadedModel, load_model, load_tokenizer, model_reference, resolve_dtype
from grpo_cli.models.merge import MergeResult, merge_adapter
from grpo_cli.models.sources import ModelSource, load_source_model, load_tokenizer_for, resolve_model_source

__all__ = [
    "LoadedModel",
    "MergeResult",
    "ModelSource",
    "load_model",
    "load_source_model",
    "load_tokenizer",
    "load_tokenizer_for",
    "merge_adapter",
    "model_reference",
    "push_run",
    "resolve_dtype",
    "resolve_model_source",
    "stage_run",
    "write_card",
]
