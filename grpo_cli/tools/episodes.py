"""Multi-turn tool rollouts outside a trainer, the way GRPOTrainer runs them (for `grpo eval` and the dry run).

Same steps as TRL 1.16's tool loop: render the prompt with the rollout's tools, generate, parse
the turn with `parse_response`, call each requested tool (an exception becomes `{"error": ...}`
and counts as a failure), append the tool messages as *token ids* (the template's suffix after
the assistant turn, not a re-rendering) and generate again, until no tool is called, the
iteration limit is hit, or the completion budget (`max_completion_length`) is spent.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.progress import advance
from grpo_cli.tools.loading import Toolset, make_environment


@dataclass
class Episode:
    """One rollout: the completion as TRL's rewards see it, plus tool counts."""

    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    tool_calls: int = 0
    tool_failures: int = 0
    truncated: bool = False
    environment: Any = None
    tool_tokens: int = 0
    """Tokens of tool results inside `ids` (not written by the model; TRL's completion length leaves them out)."""

    @property
    def model_tokens(self) -> int:
        """Tokens the model generated: what TRL's `completions/mean_length` counts for a tool run."""
        return len(self.ids) - self.tool_tokens

    @property
    def text(self) -> str:
        """The final assistant turn's text (what answer extraction reads)."""
        for message in reversed(self.completion):
            if message.get("role") == "assistant":
                return str(message.get("content") or "")
        return ""


def call_tool(tools: dict[str, Any], call: dict[str, Any]) -> tuple[str, Any, bool]:
    """(name, result, failed) for one parsed tool call, as TRL reports it to the model."""
    if call.get("type") != "function":
        return call.get("name", "unknown"), {"error": f"Unsupported tool call type: {call.get('type')}"}, True
    function = call["function"]
    name = function.get("name", "unknown")
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        result = tools[name](**(function.get("arguments") or {}))
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
        return name, result, False
    except Exception as exc:
        return name, {"error": str(exc)}, True


async def _await(awaitable: Any) -> Any:
    return await awaitable


def ensure_response_parser(tokenizer: Any) -> None:
    """Give the tokenizer TRL's response template for known chat templates (what GRPOTrainer does at init)."""
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        from trl.chat_template_utils import add_response_schema

        add_response_schema(tokenizer)


def tool_suffix_ids(tokenizer: Any, tool_messages: list[dict[str, Any]]) -> list[int]:
    """Token ids the chat template puts after an assistant tool-call turn for these results (TRL's method)."""
    dummy = [{"role": "user", "content": "dummy"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]}]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    return list(full[len(prefix):])


def start_episodes(toolset: Toolset, prompts: list[Any], rows: list[dict[str, Any]]) -> list[Episode]:
    """One episode per prompt: an environment instance reset with the row, its observation appended."""
    episodes = []
    for prompt, row in zip(prompts, rows, strict=True):
        prompt = copy.deepcopy(prompt)
        env = None
        if toolset.environments:
            name = row.get("environment") if toolset.routed else None
            env = make_environment(toolset, name)
            kwargs = {k: v for k, v in row.items() if k != "environment"} if toolset.routed else dict(row)
            observation = env.reset(prompt=prompt, **{k: v for k, v in kwargs.items() if k != "prompt"})
            if isinstance(observation, str):
                prompt = prompt[:-1] + [{**prompt[-1], "content": str(prompt[-1]["content"]) + observation}]
        episodes.append(Episode(prompt=prompt, environment=env))
    return episodes


def _generate(model: Any, tokenizer: Any, inputs: list[list[int]], *, max_new: list[int], temperature: float,
              top_p: float, batch_size: int) -> list[list[int]]:
    import torch

    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[list[int]] = []
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start:start + batch_size]
        width = max(len(x) for x in chunk)
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in chunk], device=device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in chunk], device=device)
        sample = temperature > 0
        with torch.inference_mode():
            gen = model.generate(input_ids=ids, attention_mask=mask, do_sample=sample,
                                 temperature=temperature if sample else None, top_p=top_p if sample else None,
                                 top_k=0 if sample else None, max_new_tokens=max(max_new[start:start + batch_size]),
                                 pad_token_id=pad, eos_token_id=tokenizer.eos_token_id)
        for row, limit in zip(gen[:, width:].tolist(), max_new[start:start + batch_size], strict=True):
            if tokenizer.eos_token_id in row:
                row = row[: row.index(tokenizer.eos_token_id) + 1]
            out.append([t for t in row if t != pad or t == tokenizer.eos_token_id][:limit])
        advance(0)  # a heartbeat: a piped console hears from a long turn too
    return out


def run_episodes(model: Any, tokenizer: Any, toolset: Toolset, episodes: list[Episode], *, max_tokens: int,
                 max_iterations: int | None, temperature: float, top_p: float, batch_size: int) -> list[Episode]:
    """Roll every episode out to the end (in place); returns them."""
    from trl.chat_template_utils import parse_response

    ensure_response_parser(tokenizer)
    was_training = model.training
    model.eval()
    tools = [toolset.tools_for(e.environment) for e in episodes]
    prompt_ids = [list(tokenizer.apply_chat_template(e.prompt, tools=t or None, add_generation_prompt=True,
                                                     tokenize=True, return_dict=False))
                  for e, t in zip(episodes, tools, strict=True)]
    try:
        active = list(range(len(episodes)))
        iteration = 0
        while active:
            new = _generate(model, tokenizer, [prompt_ids[i] + episodes[i].ids for i in active],
                            max_new=[max_tokens - len(episodes[i].ids) for i in active], temperature=temperature,
                            top_p=top_p, batch_size=batch_size)
            still = []
            for i, ids in zip(active, new, strict=True):
                ep = episodes[i]
                prefix = prompt_ids[i] + ep.ids
                ep.ids += ids
                turn = parse_response(tokenizer, ids, prefix=prefix, tools=tools[i]) if ids else {}
                if turn:
                    ep.completion.append(turn)
                if len(ep.ids) >= max_tokens and (not ids or ids[-1] != tokenizer.eos_token_id):
                    ep.truncated = True
                    continue
                calls = turn.get("tool_calls") if turn else None
                if not calls or (max_iterations is not None and iteration >= max_iterations):
                    continue
                by_name = {t.__name__: t for t in tools[i]}
                messages = []
                for call in calls:
                    name, result, failed = call_tool(by_name, call)
                    ep.tool_calls += 1
                    ep.tool_failures += failed
                    messages.append({"role": "tool", "name": name, "content": str(result)})
                suffix = tool_suffix_ids(tokenizer, messages)
                if len(ep.ids) + len(suffix) > max_tokens:  # as TRL: drop results that do not fit, stop here
                    continue
                ep.completion += messages
                ep.ids += suffix
                ep.tool_tokens += len(suffix)
                if len(ep.ids) < max_tokens:  # room left to answer
                    still.append(i)
                else:
                    ep.truncated = True
            advance(len(active) - len(still))  # episodes that ended this turn
            active = still
            iteration += 1
    finally:
        model.train(was_training)
    return episodes
