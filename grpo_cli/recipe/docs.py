"""Generate the recipe reference (docs/recipes.md) and the JSON Schema from the pydantic schema.

The schema is the single source of truth; a test fails when docs/recipes.md is stale.
Regenerate with `grpo schema --markdown --out docs/recipes.md`.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.schema.common import Section

COMMON_TRAINING = (
    "learning_rate", "beta", "num_generations", "max_completion_length", "per_device_train_batch_size",
    "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size", "num_iterations", "epsilon",
    "epsilon_high", "loss_type", "scale_rewards", "importance_sampling_level", "multi_objective_aggregation",
    "mask_truncated_completions", "temperature", "top_p", "top_k", "repetition_penalty", "max_steps",
    "num_train_epochs", "lr_scheduler_type", "warmup_steps", "weight_decay", "max_grad_norm", "bf16",
    "gradient_checkpointing", "logging_steps", "save_strategy", "save_steps", "save_total_limit",
    "eval_strategy", "eval_steps", "per_device_eval_batch_size", "num_generations_eval", "seed",
    "log_completions", "use_liger_kernel",
)


def attribute_docstrings(cls: type) -> dict[str, str]:
    """The docstrings written under each field of a class (read from its source)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for stmt, nxt in zip(body, body[1:], strict=False):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _sections() -> dict[str, type[Section]]:
    found: dict[str, type[Section]] = {}
    todo: list[type[Section]] = [Section]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found[sub.__name__] = sub
            todo.append(sub)
    return found


def _documented_schema() -> dict[str, Any]:
    """Recipe.model_json_schema() with each field's attribute docstring as its description."""
    schema = Recipe.model_json_schema()
    classes = _sections()
    targets = [("Recipe", schema), *schema.get("$defs", {}).items()]
    for name, sub in targets:
        cls = classes.get(name)
        if cls is None or name == "TrainingSection":
            continue
        docs: dict[str, str] = {}
        for klass in reversed(cls.__mro__):  # a shared base's fields (health guards' `action`) keep their docs
            if issubclass(klass, Section):
                docs.update(attribute_docstrings(klass))
        for field, doc in docs.items():
            prop = sub.get("properties", {}).get(field)
            if prop is not None:
                prop["description"] = doc
    return schema


def recipe_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a recipe, including the installed TRL's GRPOConfig fields."""
    schema = _documented_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "grpo recipe"
    schema.setdefault("properties", {})["extends"] = {
        "description": "Recipe(s) to inherit from, relative to this file; later keys override.",
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    }
    return schema


def _type_text(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "anyOf" in prop:
        return " or ".join(_type_text(p, defs) for p in prop["anyOf"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type_text(prop.get('items', {}), defs)}"
    if kind == "object" and "additionalProperties" in prop and isinstance(prop["additionalProperties"], dict):
        return f"mapping to {_type_text(prop['additionalProperties'], defs)}"
    return kind if isinstance(kind, str) else " or ".join(kind)


def _default_text(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop:
        return ""
    value = prop["default"]
    return "`null`" if value is None else f"`{value}`".replace("|", "\\|")


def _section(name: str, schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    lines = [f"## `{name}`", "", schema.get("description", ""), "",
             "| key | type | default | description |", "|---|---|---|---|"]
    required = set(schema.get("required", []))
    nested: list[tuple[str, dict[str, Any]]] = []
    for key, prop in schema.get("properties", {}).items():
        desc = " ".join(prop.get("description", "").split()).replace("|", "\\|")
        lines.append(f"| `{key}` | {_type_text(prop, defs)} | {_default_text(prop, key in required)} | {desc} |")
        for ref in _refs(prop):
            nested.append((f"{name}.{key}", defs[ref]))
    lines.append("")
    for sub_name, sub in nested:
        lines += _section(sub_name, sub, defs)
    return lines


def _refs(prop: dict[str, Any]) -> list[str]:
    found = []
    if "$ref" in prop:
        found.append(prop["$ref"].rsplit("/", 1)[-1])
    for p in prop.get("anyOf", []):
        found += _refs(p)
    if "items" in prop:
        found += _refs(prop["items"])
    return found


def recipe_markdown() -> str:
    """The Markdown recipe reference."""
    schema = _documented_schema()
    defs = schema.get("$defs", {})
    out = [
        "# Recipe reference",
        "",
        "<!-- Generated by `grpo schema --markdown --out docs/recipes.md` from grpo_cli/schema; do not edit. -->",
        "",
        "A recipe is a YAML file with the sections below. `extends: base.yaml` (or a list) inherits from other",
        "recipes, relative to the file; `${oc.env:VAR,default}` reads the environment; `section.key=value`",
        "arguments after the recipe path override any key. Unknown keys are errors, with a hint when the",
        "name comes from an older guide (`kl_coef` -> `training.beta`, `max_new_tokens` ->",
        "`training.max_completion_length`, `max_prompt_length` -> `data.max_prompt_tokens`).",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    required = set(schema.get("required", []))
    sections = []
    for key, prop in schema["properties"].items():
        desc = " ".join(prop.get("description", "").split())
        out.append(f"| `{key}` | {_type_text(prop, defs)} | {_default_text(prop, key in required)} | {desc} |")
        refs = _refs(prop)
        if refs and key != "training":
            sections.append((key, defs[refs[0]]))
    out.append("")
    for key, sub in sections:
        out += _section(key, sub, defs)
    out += _training_markdown(defs.get("TrainingSection", {}))
    return "\n".join(out).rstrip() + "\n"


def _training_markdown(schema: dict[str, Any]) -> list[str]:
    props = schema.get("properties", {})
    lines = [
        "## `training`", "",
        "Any field of TRL's `GRPOConfig` (and the `TrainingArguments` it extends), with TRL's names. Keys and",
        "value types are checked against the installed TRL without importing it; `loss_type`,",
        "`scale_rewards`, `importance_sampling_level`, `multi_objective_aggregation` and the strategies are",
        "checked against the values TRL 1.16 accepts. Fields owned by other sections (`output_dir`,",
        "`report_to`, `use_vllm`, `vllm_*`, `reward_weights`, `deepspeed`, `fsdp`) are rejected with a",
        "pointer to where they live. The most used fields, with the defaults of the installed TRL:", "",
        "| key | type | TRL default | description |", "|---|---|---|---|",
    ]
    for key in COMMON_TRAINING:
        prop = props.get(key)
        if prop is None:
            continue
        desc = " ".join(prop.get("description", "").split()).replace("|", "\\|")
        if len(desc) > 220:
            desc = desc[:217].rsplit(" ", 1)[0] + "..."
        lines.append(f"| `{key}` | {_type_text(prop, {})} | {_default_text(prop, False)} | {desc} |")
    lines += ["", f"{len(props)} fields in all; `grpo schema` lists every one with its type, default and help.", ""]
    return lines
