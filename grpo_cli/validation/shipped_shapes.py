"""The shipped table of model shapes (assets/model_shapes.json): memory plans before any download.

Each entry holds config.json's own keys for a family of hub ids, the config.json it was transcribed
from and the parameter count its model card publishes. The memory plan prefers a local or cached
config.json and falls back to this table; a recipe's `model.shape` block adds a model.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from grpo_cli.paths import ASSETS_DIR

TABLE = ASSETS_DIR / "model_shapes.json"
_META = ("ids", "source", "published_params", "extra_params_note")


@cache
def _entries() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(TABLE.read_text(encoding="utf-8"))["models"])


def _normalise(ref: str) -> str:
    return ref.strip().rstrip("/").lower()


def shipped_shape(ref: str) -> tuple[dict[str, Any], str] | None:
    """(config-like dict, where from) for a hub id in the table (case-insensitive), else None."""
    want = _normalise(ref)
    for entry in _entries():
        if any(_normalise(i) == want for i in entry["ids"]):
            config = {k: v for k, v in entry.items() if k not in _META}
            return config, f"grpo's shipped shape table ({entry['source']})"
    return None


def shipped_model_ids() -> list[str]:
    """Every hub id the table knows, in table order."""
    return [i for entry in _entries() for i in entry["ids"]]


def shipped_entries() -> list[dict[str, Any]]:
    """The raw entries (for tests and docs)."""
    return [dict(e) for e in _entries()]
