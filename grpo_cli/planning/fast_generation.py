"""Which generation path `grpo train` takes, decided from the recipe before anything loads, with the reason.

On a GPU, TRL's transformers path spends 80-97 % of a GRPO step generating, bound by kernel launches and Python
per token, not by the card (docs/performance.md, "GPU"). grpo speeds it up two ways where they apply:

- the LoRA adapter merged into the base weights while generating (training/merged_generation.py);
- a static KV cache with compiled decode steps (training/compiled_decode.py), through TRL's own settings
  (`cache_implementation`, `generation_kwargs`); transformers compiles decode steps only on GPUs.

`grpo validate` prints the decision as the plan's "generation path" line and `grpo train` acts on the same
decision (`generation_path`), so the plan says what the run does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

STATIC_CACHE_SINCE = (5, 24)
"""The transformers release grpo's static cache is verified with: `generation_kwargs.max_cache_len` (one cache
size for every round, so decode compiles once) and `GenerationConfig.disable_compile`."""


MERGE_ENV = "GRPO_MERGED_GENERATION"
"""0 turns the LoRA merge while generating off (training/merged_generation.py); the plan and the run both read it."""


def merge_switched_off() -> bool:
    """Whether $GRPO_MERGED_GENERATION turns the merge off; a value that is not a switch is refused (a typo such
    as `of` would otherwise leave it on while the user believes it off)."""
    value = os.environ.get(MERGE_ENV, "").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return False
    if value in ("0", "false", "no", "off"):
        return True
    raise GrpoError(f"${MERGE_ENV} is {value!r}, which is not a switch", where=f"${MERGE_ENV}",
                    fix=f"Set {MERGE_ENV}=0 to generate through the LoRA layers as TRL does, 1 (the default) to "
                        "merge the adapter while generating, or unset it.")


@dataclass(frozen=True)
class GenerationPath:
    """How a training step generates: the backend, and whether each speed-up applies, with its reason."""

    vllm: bool
    merge: bool
    merge_why: str
    static: bool
    static_why: str
    compiled: bool

    def line(self) -> str:
        """The plan's line: the path in a few words, then why."""
        if self.vllm:
            return "vLLM (TRL merges a LoRA adapter into the weights it syncs to vLLM)"
        head = "transformers" if self.merge or self.static else "transformers as TRL does it"
        return f"{head}: {self.merge_why}; {self.static_why}"


def generation_path(recipe: Recipe, *, cuda: bool) -> GenerationPath:
    """The path for this recipe on a CUDA device (`cuda`) or the CPU."""
    if recipe.launch.vllm.mode != "off":
        return GenerationPath(True, False, "vLLM generates", False, "vLLM generates", False)
    merge, merge_why = merge_rule(recipe)
    static, static_why = _static_rule(recipe, cuda)
    return GenerationPath(False, merge, merge_why, static, static_why, static and cuda)


def merge_rule(recipe: Recipe) -> tuple[bool, str]:
    """(the adapter is merged while transformers generates, why); the memory plan counts the copy it keeps."""
    lora, spec = recipe.model.lora, recipe.launch.spec
    if lora is None:
        return False, "no adapter to merge (full fine-tune)"
    if merge_switched_off():
        return False, f"adapter not merged (${MERGE_ENV}={os.environ[MERGE_ENV].strip()})"
    if recipe.model.quantization:
        return False, f"adapter not merged (merging into a {recipe.model.quantization} base is lossy)"
    if lora.use_dora:
        return False, "adapter not merged (DoRA's merge is not a plain delta)"
    if spec.shards_weights:
        return False, "adapter not merged (weights sharded by ZeRO-3/FSDP)"
    dropout = f"; it samples without LoRA's dropout {lora.dropout:g}, as vLLM does" if lora.dropout > 0 else ""
    return True, f"adapter merged while generating (the base restored from a kept copy{dropout})"


def _static_rule(recipe: Recipe, cuda: bool) -> tuple[bool, str]:
    """(static cache on, why); the recipe's `sampling.compiled_decode` forces it where it can apply."""
    t = recipe.training
    forced = recipe.sampling.compiled_decode
    if forced is False:
        return False, "dynamic cache (sampling.compiled_decode: false)"
    kwargs = t.get("generation_kwargs")
    own = t.get("cache_implementation") or (kwargs.get("cache_implementation") if isinstance(kwargs, dict) else None)
    if own:
        return False, f"the recipe's own cache_implementation: {own}, as TRL runs it"
    blocked = _static_blocked(recipe)
    if blocked:
        return False, f"dynamic cache ({blocked})"
    if forced is None and not cuda:
        return False, "dynamic cache (on the CPU transformers compiles nothing; sampling.compiled_decode: true " \
                      "forces a static cache)"
    old = _transformers_too_old()
    if old:
        return False, f"dynamic cache ({old})"
    return True, ("static cache + compiled decode (the first round compiles)" if cuda else
                  "static cache (forced; compiled decode needs a GPU)")


def _static_blocked(recipe: Recipe) -> str:
    """Why a static cache cannot apply to this recipe, or ""."""
    t = recipe.training
    if recipe.tools or recipe.environment is not None:
        return "tool calls change the sequence shapes every turn"
    if recipe.data.images is not None:
        return "vision-language prompts (image features) are not compiled"
    if recipe.sampling.dynamic is not None:
        return "dynamic sampling's extra rounds change the batch size"
    if t.use_transformers_continuous_batching or t.use_transformers_paged:
        return "continuous batching manages its own cache"
    if recipe.model.quantization:
        return f"a {recipe.model.quantization} base cannot be compiled"
    if recipe.launch.spec.shards_weights:
        return "sharded weights (ZeRO-3/FSDP) are gathered per layer"
    return ""


def _transformers_too_old() -> str:
    """Why the installed transformers cannot give the static path, or ""."""
    version = _transformers_version()
    if version is None:
        return "transformers is not installed"
    try:
        found = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return f"transformers {version} is not a release grpo can compare"
    if found < STATIC_CACHE_SINCE:
        return f"transformers {version} predates {'.'.join(map(str, STATIC_CACHE_SINCE))} (max_cache_len)"
    return ""


def _transformers_version() -> str | None:
    """The installed transformers' version from its dist-info folder beside the package (a directory listing:
    `importlib.metadata` scans every distribution on the path, 20-30 ms of `grpo validate`), else from metadata."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return None
    for info in Path(spec.origin).parent.parent.glob("transformers-*.dist-info"):
        return info.name.removeprefix("transformers-").removesuffix(".dist-info")
    import importlib.metadata  # ~20 ms to import, as much again to scan: only for an editable or unusual install

    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None
