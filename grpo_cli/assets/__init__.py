"""Assets shipped inside the package: the tiny offline model and its data.

Recipes name them as `bundled:<relative path>`, e.g. `bundled:tiny-arith`.
"""

from __future__ import annotations

from pathlib import Path

from grpo_cli.schema.common import BUNDLED_PREFIX

ASSETS_DIR = Path(__file__).resolve().parent


def bundled_path(reference: str) -> Path | None:
    """The path of a `bundled:` reference, or None when `reference` is not one."""
    if not reference.startswith(BUNDLED_PREFIX):
        return None
    return ASSETS_DIR / reference[len(BUNDLED_PREFIX):].lstrip("/")
