"""The model a script trains, read from the calls that build it: `AutoModelForCausalLM.from_pretrained("id")`,
Unsloth's `FastLanguageModel.from_pretrained(model_name=...)` (4-bit, `fast_inference` vLLM), LoRA from
`get_peft_model` / `LoraConfig` / `peft_config=`, `BitsAndBytesConfig`, and `tokenizer.chat_template = ...`."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.importing.common import ImportResult
from grpo_cli.importing.script_ast import NO, Script, call_name, keyword, receiver

MODEL_NEEDED = "__model_needed__"
"""cfg key: (line, expression) of a model id the script computes at run time."""
ID_KEYWORDS = ("model_name", "pretrained_model_name_or_path", "model_name_or_path", "model_id")
LORA_KEYS = {"r": "lora_r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
             "target_modules": "lora_target_modules"}
MOVES = {"to", "cuda", "train", "bfloat16", "half", "float"}
"""Calls on a built model that return it (placed, cast, put in training mode): the model is what they are called on."""
PRETRAINED_KEYS = {"torch_dtype": "torch_dtype", "dtype": "torch_dtype", "attn_implementation": "attn_implementation",
                   "trust_remote_code": "trust_remote_code", "load_in_4bit": "load_in_4bit",
                   "load_in_8bit": "load_in_8bit"}


@dataclass
class ModelFacts:
    """What the calls building the trainer's model say."""

    cfg: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    lost: list[tuple[str, str, str]] = field(default_factory=list)
    unknown: ast.AST | None = None


def read_model(script: Script, trainer: ast.Call, cfg: dict[str, Any], skipped: ImportResult) -> None:
    """The trainer's `model=` (a literal, or traced to the calls that built it) and its LoRA, into cfg keys."""
    node = keyword(trainer, "model") or (trainer.args[0] if trainer.args else None)
    if node is None:
        return
    facts = ModelFacts()
    literal = script.text(node)
    if literal is not None:
        facts.cfg["model_name_or_path"] = literal
    else:
        _trace(script, node, facts, 0)
    peft = keyword(trainer, "peft_config")
    if peft is not None:
        _peft_argument(script, peft, facts)
    if "model_name_or_path" not in facts.cfg and "model_name_or_path" not in cfg:
        unknown = facts.unknown if facts.unknown is not None else node
        cfg[MODEL_NEEDED] = (getattr(unknown, "lineno", trainer.lineno), script.source(unknown))
    for key, value in facts.cfg.items():
        cfg.setdefault(key, value)
    skipped.notes += facts.notes
    for key, value, why in facts.lost:
        skipped.drop(key, value, why)
    _chat_template(script, cfg, skipped)


def _trace(script: Script, node: ast.AST, facts: ModelFacts, depth: int) -> None:
    if depth > 12:
        return
    if isinstance(node, ast.Name):
        found = script.lookup(node.id, node)
        if found is None:
            facts.unknown = node
        else:
            _trace(script, found, facts, depth + 1)
        return
    if not isinstance(node, ast.Call):
        facts.unknown = node
        return
    name = call_name(node)
    if name == "get_peft_model":
        base = node.args[0] if node.args else keyword(node, "model")
        _lora(script, node, facts, args_from=1)
        if base is not None:
            _trace(script, base, facts, depth + 1)
    elif name == "prepare_model_for_kbit_training" and node.args:
        _trace(script, node.args[0], facts, depth + 1)
    elif name in MOVES and receiver(node) is not None:  # from_pretrained(...).to(device)
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    elif name == "from_pretrained":
        _pretrained(script, node, facts)
    else:
        facts.unknown = node


def _pretrained(script: Script, node: ast.Call, facts: ModelFacts) -> None:
    ident = node.args[0] if node.args else keyword(node, *ID_KEYWORDS)
    text = script.text(ident)
    if text is None:
        facts.unknown = ident if ident is not None else node
    else:
        facts.cfg["model_name_or_path"] = text
    owner = script.source(receiver(node) or node, 40)
    for kw in node.keywords:
        value = script.value(kw.value)
        if kw.arg in PRETRAINED_KEYS:
            target = PRETRAINED_KEYS[kw.arg]
            shown = ast.unparse(kw.value) if value is NO else value
            if value is NO and kw.arg in ("torch_dtype", "dtype") and isinstance(kw.value, ast.Attribute):
                facts.cfg[target] = shown  # torch.bfloat16
            elif value is not NO and value is not None:
                facts.cfg[target] = value
            elif value is NO:
                facts.lost.append((f"{owner}.from_pretrained({kw.arg}=...)", shown,
                                   f"computed when the script runs (line {node.lineno})"))
        elif kw.arg == "quantization_config":
            _bits_and_bytes(script, kw.value, facts)
        elif kw.arg in ("fast_inference", "gpu_memory_utilization"):
            _unsloth_vllm(kw.arg, value, facts, node.lineno)
        elif kw.arg not in ID_KEYWORDS + HARMLESS_PRETRAINED and kw.arg != "max_seq_length":
            shown = ast.unparse(kw.value) if value is NO else value
            facts.lost.append((f"{owner}.from_pretrained({kw.arg}=...)", shown,
                               f"a loading option grpo does not carry (line {node.lineno})"))
        elif kw.arg == "max_seq_length":
            facts.notes.append(f"Unsloth's max_seq_length {value if value is not NO else ''} (line {node.lineno}) "
                               "is the model's context: grpo bounds prompt and completion with "
                               "data.max_prompt_tokens and training.max_completion_length")


def _unsloth_vllm(arg: str, value: Any, facts: ModelFacts, line: int) -> None:
    if arg == "fast_inference" and value is True:
        facts.cfg["use_vllm"] = True
        facts.cfg["vllm_mode"] = "colocate"
        facts.notes.append(f"Unsloth's fast_inference=True (line {line}: vLLM inside the training process) -> "
                           "launch.vllm.mode: colocate")
    elif arg == "gpu_memory_utilization" and isinstance(value, int | float):
        facts.cfg["vllm_gpu_memory_utilization"] = value


def _bits_and_bytes(script: Script, node: ast.AST, facts: ModelFacts) -> None:
    found = script.lookup(node.id, node) if isinstance(node, ast.Name) else node
    if isinstance(found, ast.Call) and call_name(found) == "BitsAndBytesConfig":
        for bits in ("4", "8"):
            if script.value(keyword(found, f"load_in_{bits}bit")) is True:
                facts.cfg[f"load_in_{bits}bit"] = True
        return
    facts.lost.append(("from_pretrained(quantization_config=...)", script.source(node),
                       "a quantization built in code: set model.quantization (4bit or 8bit)"))


def _lora(script: Script, node: ast.Call, facts: ModelFacts, args_from: int) -> None:
    """Unsloth's `get_peft_model(model, r=..., lora_alpha=...)` or peft's `get_peft_model(model, LoraConfig(...))`."""
    config = node.args[args_from] if len(node.args) > args_from else keyword(node, "peft_config")
    if config is not None:
        _peft_argument(script, config, facts)
        return
    _lora_keywords(script, node, facts)


def _peft_argument(script: Script, node: ast.AST, facts: ModelFacts) -> None:
    found = script.lookup(node.id, node) if isinstance(node, ast.Name) else node
    if isinstance(found, ast.Call) and call_name(found) == "LoraConfig":
        _lora_keywords(script, found, facts)
    elif isinstance(found, ast.Call) and call_name(found) == "get_peft_config" and facts.cfg.get("use_peft"):
        return
    elif isinstance(found, ast.Call) and call_name(found) == "get_peft_config":
        facts.notes.append(f"peft_config=get_peft_config(...) (line {getattr(node, 'lineno', '?')}) follows the "
                           "YAML's use_peft / "
                           "lora_* keys")
    elif not (isinstance(found, ast.Constant) and found.value is None):
        facts.lost.append(("peft_config", script.source(node), f"a LoRA built in code (line "
                           f"{getattr(node, 'lineno', '?')}): write "
                           "it as model.lora (r, alpha, target_modules)"))


HARMLESS_PRETRAINED = ("max_lora_rank", "device_map", "token", "cache_dir", "use_cache", "low_cpu_mem_usage",
                       "revision", "quantization_config", "fast_inference", "gpu_memory_utilization",
                       *PRETRAINED_KEYS)
"""from_pretrained keywords that change nothing a recipe says (or are read above)."""
ANY = object()
LORA_DEFAULTS: dict[str, object] = {"bias": "none", "use_rslora": False, "loftq_config": None, "random_state": ANY,
                                    "task_type": ANY, "inference_mode": False, "max_seq_length": ANY}
"""LoRA keywords that are fine at these values (any value for ANY: a seed, peft's task label)."""
UNSLOTH_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _lora_keywords(script: Script, call: ast.Call, facts: ModelFacts) -> None:
    facts.cfg["use_peft"] = True
    if call_name(call) == "LoraConfig":  # peft's defaults
        facts.cfg.update({"lora_r": 8, "lora_alpha": 8})
    else:  # Unsloth's FastLanguageModel.get_peft_model defaults
        facts.cfg.update({"lora_r": 16, "lora_alpha": 16, "lora_target_modules": UNSLOTH_TARGETS})
    for kw in call.keywords:
        if kw.arg in LORA_KEYS:
            value = script.value(kw.value)
            if value is NO:
                facts.lost.append((f"{call_name(call)}({kw.arg}=...)", script.source(kw.value),
                                   f"computed when the script runs (line {call.lineno}): set model.lora.{kw.arg}"))
            else:
                facts.cfg[LORA_KEYS[kw.arg]] = value
        elif kw.arg == "use_gradient_checkpointing" and script.value(kw.value) not in (False, NO):
            facts.cfg["gradient_checkpointing"] = True
        elif kw.arg is not None and kw.arg != "use_gradient_checkpointing" and _lora_loss(script, kw):
            facts.lost.append((f"{call_name(call)}({kw.arg}=...)", script.source(kw.value, 50),
                               f"a LoRA option model.lora does not carry (line {call.lineno})"))
    note = f"LoRA from {call_name(call)}(...) (line {call.lineno}) -> model.lora"
    if note not in facts.notes:  # one LoraConfig reached twice (get_peft_model and peft_config=)
        facts.notes.append(note)


def _lora_loss(script: Script, kw: ast.keyword) -> bool:
    """Whether a LoRA keyword model.lora does not carry changes the adapter (bias="all", use_rslora=True...)."""
    if kw.arg not in LORA_DEFAULTS:
        return True
    default = LORA_DEFAULTS[kw.arg]
    return default is not ANY and script.value(kw.value) != default


def _chat_template(script: Script, cfg: dict[str, Any], skipped: ImportResult) -> None:
    for node in ast.walk(script.tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "chat_template"
                                                 for t in node.targets):
            text = script.text(node.value)
            if text is not None:
                cfg.setdefault("chat_template", text)
            else:
                skipped.drop("tokenizer.chat_template", script.source(node.value), f"set in code (line "
                             f"{node.lineno}): give the Jinja text as model.chat_template")
        elif isinstance(node, ast.Call) and call_name(node) == "get_chat_template":
            name = script.value(keyword(node, "chat_template"))
            skipped.drop("get_chat_template(chat_template=...)", name if name is not NO else script.source(node),
                         f"Unsloth's named chat template (line {node.lineno}): give its Jinja text as "
                         "model.chat_template, or the model's own template is used")
