"""`launch.vllm.mode: async`: TRL's AsyncGRPOTrainer from the recipe, against `grpo vllm-serve`.

The async trainer differs from GRPOTrainer in what it is handed: a model path (it loads the model itself, with its
packed prefix-tree attention), conversational prompts only (its rollout worker renders every prompt through the
chat template and parses each answer with a response template), and its own AsyncGRPOConfig. This module maps
the recipe onto those; planning/async_mode.py has already refused what it cannot honour. On a GPU the
trainer runs as TRL ships it (NCCL weight transfer); on the CPU through training/async_cpu.py. Where the
installed TRL keeps the async trainer is grpo_cli/trl_compat.py's to say.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import TYPE_CHECKING, Any

from grpo_cli import trl_compat
from grpo_cli.errors import GrpoError
from grpo_cli.launching.vllm_server import server_base_url
from grpo_cli.models import model_reference
from grpo_cli.planning.async_mode import async_plan, epsilons
from grpo_cli.runs.manifest import AsyncRun
from grpo_cli.training.async_cpu import CpuWeightTransfer

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.training.run_state import RunState
    from grpo_cli.trl_compat import AsyncGRPOConfig, AsyncGRPOTrainer

RAW_ROLE = "user"


def async_config(recipe: Recipe, kwargs: dict[str, Any], dtype: str) -> AsyncGRPOConfig:
    """AsyncGRPOConfig from the GRPOConfig keyword arguments grpo builds (the keys it shares with them), plus the
    server, the staleness bound and a fixed count of completions per micro-step (as the synchronous trainer)."""
    config_class = trl_compat.async_classes()[0]
    names = {f.name for f in dataclasses.fields(config_class)}
    kw = {k: v for k, v in kwargs.items() if k in names}
    v = recipe.launch.vllm
    kw.update(vllm_server_base_url=server_base_url(recipe), vllm_server_timeout=v.server_timeout,
              max_staleness=v.max_staleness, token_budget=0, dtype=dtype,
              trust_remote_code=recipe.model.trust_remote_code)
    if recipe.model.revision:
        kw["model_init_kwargs"] = {"revision": recipe.model.revision}
    try:
        return config_class(**kw)
    except (ValueError, TypeError) as exc:
        raise GrpoError(f"TRL rejected the async training settings: {str(exc).splitlines()[0]}", where="training",
                        fix="Fix the named training key; `grpo validate` checks most of these up front.") from None


def raw_template(tokenizer: Any) -> str:
    """A chat template that renders a one-message conversation exactly as the tokenizer encodes its text alone,
    special tokens included: the synchronous trainer's tokens for a plain prompt."""
    probe = "x"
    full, bare = tokenizer(probe)["input_ids"], tokenizer(probe, add_special_tokens=False)["input_ids"]
    at = next((i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare), 0)
    prefix = tokenizer.convert_ids_to_tokens(full[:at])
    suffix = tokenizer.convert_ids_to_tokens(full[at + len(bare):])
    quoted = "".join("{{ " + json.dumps(t) + " }}" for t in prefix)
    return quoted + "{{ messages[0]['content'] }}" + "".join("{{ " + json.dumps(t) + " }}" for t in suffix)


def plain_response_template(tokenizer: Any, eos_ids: list[int]) -> dict[str, Any]:
    """The whole answer is the message content, up to an end-of-sequence token (no tool calls, no reasoning)."""
    ends = [re.escape(t) for t in tokenizer.convert_ids_to_tokens(eos_ids) if t]
    return {"defaults": {"role": "assistant"},
            "fields": {"content": {"close_pattern": "(?:" + "|".join(ends) + r")\s*|$" if ends else "$",
                                   "content": "text"}}}


def async_tokenizer(tokenizer: Any, plain: bool, first_prompt: str | None) -> Any:
    """A copy of the run's tokenizer as the rollout worker needs it (the run keeps and saves its own)."""
    tok = copy.deepcopy(tokenizer)
    if plain:
        tok.chat_template = raw_template(tok)
        if first_prompt is not None:
            rendered = tok.apply_chat_template([{"role": RAW_ROLE, "content": first_prompt}], return_dict=False,
                                               add_generation_prompt=True)
            if list(rendered) != list(tok(first_prompt)["input_ids"]):
                raise GrpoError("async mode could not render plain prompts as the tokenizer encodes them",
                                where="data.prompt", fix="Use chat prompts (`data.prompt.chat: true`) for async mode.")
    if getattr(tok, "response_template", None) is None and getattr(tok, "response_schema", None) is None:
        from trl.chat_template_utils import add_response_schema

        try:
            tok = add_response_schema(tok)  # the known chat templates: TRL's own parser for them
        except ValueError:
            eos = tok.eos_token_id
            tok.response_template = plain_response_template(tok, [eos] if isinstance(eos, int) else [])
    return tok


def async_dataset(train: Any) -> tuple[Any, bool, str | None]:
    """The training rows with conversational prompts; whether they were plain text, and the first one."""
    first = train[0]["prompt"] if len(train) else None
    if not isinstance(first, str):
        return train, False, None
    return train.map(lambda row: {"prompt": [{"role": RAW_ROLE, "content": row["prompt"]}]}), True, first


def make_async_trainer(run: RunState, config: AsyncGRPOConfig) -> AsyncGRPOTrainer:
    """TRL's AsyncGRPOTrainer with grpo's callbacks (already in run.callbacks); on the CPU, grpo's weight transfer
    (the CPU attention and the rollout worker's hooks come from training/hooks/, around this)."""
    from transformers.trainer_callback import PrinterCallback

    recipe, on_cpu = run.recipe, run.loaded.device == "cpu"
    transfer = CpuWeightTransfer(server_base_url(recipe), recipe.launch.vllm.server_timeout) if on_cpu else None
    train, plain, first = async_dataset(run.data.train)
    tokenizer = async_tokenizer(run.loaded.processing_class, plain, first)
    trainer_class = trl_compat.async_classes()[1]
    trainer = trainer_class(model=model_reference(recipe), reward_funcs=run.reward_funcs, args=config,
                               train_dataset=train, processing_class=tokenizer, callbacks=run.callbacks,
                               peft_config=run.loaded.peft_config, weight_transfer=transfer)
    trainer.remove_callback(PrinterCallback)  # grpo prints its own compact line per log
    low, high = epsilons(recipe)
    run.manifest.async_run = AsyncRun(
        trainer=trl_compat.async_home() + ".AsyncGRPOTrainer", max_staleness=recipe.launch.vllm.max_staleness,
        correction=f"token ratio pi_theta/pi_server clipped to [{1 - low:g}, {1 + high:g}]",
        weight_sync="grpo-cpu" if on_cpu else "nccl")
    if run.console is not None:
        run.console.print("async: " + async_plan(recipe, on_cpu), markup=False, soft_wrap=True)
    return trainer
