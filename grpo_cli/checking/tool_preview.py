"""The tokenizer half of the dry run: the first prompt as the model sees it, and a tool call parsed back.

GRPOTrainer renders each prompt with `apply_chat_template(tools=...)` and reads tool calls out of
generated tokens with `parse_response`, which needs a response template (the tokenizer's own, or
one TRL knows for the chat template). Rendering an assistant tool call with the template and
parsing its tokens back shows, before training, whether a call the model makes will be understood.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grpo_cli.checking.tool_examples import example_arguments
from grpo_cli.models.loading import apply_overrides, model_reference
from grpo_cli.tools.episodes import ensure_response_parser

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

PREVIEW_CHARS = 1500


def _load_tokenizer(recipe: Recipe) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_reference(recipe), revision=recipe.model.revision,
                                              trust_remote_code=recipe.model.trust_remote_code)
    apply_overrides(tokenizer, recipe)  # the recipe's chat template, as training renders prompts
    return tokenizer


def preview(recipe: Recipe, toolset: Any, tools: list[Any], rows: dict[Any, dict[str, Any]], report: Any) -> None:
    """Fill report.prompt_preview and report.parse_check (notes instead when the tokenizer cannot load)."""
    try:
        tokenizer = _load_tokenizer(recipe)
    except (OSError, ValueError) as exc:
        report.notes.append(f"tokenizer of {recipe.model.name_or_path} not loaded ({str(exc).splitlines()[0]}): "
                            "no prompt preview or parse check")
        return
    row = next(iter(rows.values()), {})
    prompt = row.get("prompt") or [{"role": "user", "content": "(no data row)"}]
    if not isinstance(prompt, list):
        prompt = [{"role": "user", "content": str(prompt)}]
    try:
        text = tokenizer.apply_chat_template(prompt, tools=tools or None, add_generation_prompt=True, tokenize=False)
        report.prompt_preview = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + " [...]"
    except Exception as exc:
        report.flags.append(f"the chat template cannot render the prompt with the tools: {type(exc).__name__}: {exc}")
        return
    _parse_round_trip(tokenizer, prompt, report)


def _parse_round_trip(tokenizer: Any, prompt: list[dict[str, Any]], report: Any) -> None:
    from trl.chat_template_utils import parse_response

    name = next(iter(report.schemas), None)
    if name is None:
        return
    schema = report.schemas[name]
    args = example_arguments(schema, 0)
    tool_name = schema.get("function", schema).get("name", name)
    try:
        ensure_response_parser(tokenizer)
    except ValueError:
        report.flags.append("TRL cannot parse tool calls for this chat template (no response_template and not a "
                            "template TRL knows): the model's calls would be read as plain text")
        return
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": tool_name, "arguments": args}}]}
    before = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template([*prompt, call], tokenize=True, return_dict=False)
    if full[:len(before)] != before:
        report.notes.append("the template renders an assistant turn differently from its generation prompt; "
                            "parse check skipped")
        return
    parsed = parse_response(tokenizer, list(full[len(before):]), prefix=list(before))
    calls = parsed.get("tool_calls") or []
    got = calls[0]["function"] if calls else None
    if got and got.get("name") == tool_name and got.get("arguments") == args:
        report.parse_check = f"ok: {tokenizer.decode(full[len(before):])!r} parses back to {tool_name}({args})"
    else:
        report.flags.append(f"a {tool_name} call rendered by the chat template does not parse back "
                            f"(parse_response gave {parsed}): training would see no tool calls")
