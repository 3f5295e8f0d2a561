"""TRL's two chat-template checks for tool training, on a local tokenizer, with jinja2 alone.

GRPOTrainer refuses a template that cannot render a full tool exchange (user -> assistant with
tool_calls -> tool: name, argument and result must all appear), and needs the rendering of a
conversation to start with the rendering of its first turns (prefix-preserving), because it
appends tool results to generated token ids. Both are checked here on rendered text, with the
same sandbox settings transformers uses, so `grpo validate` needs neither transformers nor torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.errors import Problem

_SENTINELS = ("tool_name_a8f3e2b1", "tool_arg_key_b9d4f5c2", "tool_arg_val_d6e7a9f3", "tool_content_c4f9a8e2")


def _token(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return str(value or "")


def load_template(model_dir: Path) -> tuple[str | None, dict[str, Any]]:
    """The chat template text and tokenizer_config.json of a saved tokenizer."""
    config: dict[str, Any] = {}
    cfg = model_dir / "tokenizer_config.json"
    if cfg.is_file():
        try:
            config = json.loads(cfg.read_text(encoding="utf-8"))
        except ValueError:
            config = {}
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8"), config
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    return template, config


def render(template: str, config: dict[str, Any], messages: list[dict[str, Any]], **kwargs: Any) -> str:
    """Render like transformers' apply_chat_template(tokenize=False)."""
    from jinja2 import ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "01 Jan 2026"
    specials = {k: _token(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    return env.from_string(template).render(messages=messages, **specials, **kwargs)


def _tool_call(name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": name, "arguments": arguments}}]


def supports_tool_calling(template: str, config: dict[str, Any]) -> bool:
    """The rendered exchange keeps the tool name, argument key and value, and the tool result."""
    from jinja2.exceptions import TemplateError

    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": _tool_call(_SENTINELS[0], {_SENTINELS[1]:
                                                                                            _SENTINELS[2]})},
                {"role": "tool", "name": _SENTINELS[0], "content": _SENTINELS[3]}]
    try:
        text = render(template, config, messages)
    except (TemplateError, TypeError):
        return False
    return all(s in text for s in _SENTINELS)


def is_prefix_preserving(template: str, config: dict[str, Any]) -> bool:
    """Appending a tool result (and the generation prompt) leaves the earlier rendering untouched."""
    from jinja2.exceptions import TemplateError

    first: list[dict[str, Any]] = [{"role": "user", "content": "dummy"},
             {"role": "assistant", "content": "", "tool_calls": _tool_call("dummy", {})}]
    try:
        short = render(template, config, first)
        long = render(template, config, [*first, {"role": "tool", "name": "dummy", "content": "dummy"}],
                      add_generation_prompt=True)
    except (TemplateError, TypeError):
        return False
    return long.startswith(short)


def check_template(model_dir: Path, out: Any) -> None:
    """Add problems/warnings about the local tokenizer's chat template to a ToolCheck."""
    template, config = load_template(model_dir)
    where = "model.name_or_path"
    if not template:
        out.problems.append(Problem(where, f"the tokenizer in {model_dir} has no chat template; tools need one "
                                    "that renders tool calls", "Use a tool-calling instruct model (Qwen2.5/Qwen3 "
                                    "instruct, Llama 3.1+)."))
        return
    if not supports_tool_calling(template, config):
        out.problems.append(Problem(where, f"the chat template in {model_dir} does not render a tool-calling "
                                    "conversation (user -> assistant with tool_calls -> tool); GRPOTrainer refuses it",
                                    "Use a model whose template supports tools, or fix the template so it renders "
                                    "`tool_calls` and `tool` messages."))
        return
    if not is_prefix_preserving(template, config):
        out.warnings.append(f"the chat template in {model_dir} is not prefix-preserving (appending a tool result "
                            "changes how earlier turns render): TRL swaps in its own training template for the model "
                            "families it knows (Qwen, Llama, DeepSeek, Cohere, ...) and refuses any other template "
                            "when training starts")
    if not (config.get("response_template") or config.get("response_schema")):
        out.warnings.append(f"the tokenizer in {model_dir} has no response_template: TRL parses tool calls only "
                            "for chat templates it knows (Qwen2.5/3/3.5, Llama 3.1/3.2, GPT-OSS, GLM-4-MoE, ...); "
                            "`grpo check-tools` confirms that generated calls parse")
