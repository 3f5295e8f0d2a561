"""Example arguments for a tool, generated from its JSON schema (the dry run calls tools with them)."""

from __future__ import annotations

from typing import Any

_EXAMPLES = {"integer": (3, 17, 250), "number": (1.5, 2.0, 10.25), "string": ("a", "hello", "grpo"),
             "boolean": (True, False, True), "array": ([], [1], [1, 2]), "object": ({}, {"k": 1}, {"k": 2})}


def example_arguments(schema: dict[str, Any], variant: int) -> dict[str, Any]:
    """Arguments for a tool from its JSON schema: enum values, else a typed example (variant 0..2)."""
    params = schema.get("function", schema).get("parameters", {})
    props = params.get("properties", {})
    out: dict[str, Any] = {}
    for position, name in enumerate(params.get("required", list(props))):
        prop = props.get(name, {})
        if prop.get("enum"):
            out[name] = prop["enum"][variant % len(prop["enum"])]
            continue
        kind = prop.get("type", "string")
        kind = kind[0] if isinstance(kind, list) else kind
        out[name] = _EXAMPLES.get(kind, _EXAMPLES["string"])[(variant + position) % 3]  # a, b differ
    return out
