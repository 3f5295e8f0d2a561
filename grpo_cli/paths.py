"""One rule for "what does this model or data reference point to".

A reference is, in this order: a `bundled:` asset shipped in the package; an absolute (or `~`) path; a path
relative to the recipe's directory; a path relative to the current directory. When neither relative
location exists the recipe-relative one is returned, so error messages name the place a recipe author means.
Command-line flags pass `base_dir=None`, which makes the current directory the only relative root.
A model reference that resolves to nothing local and does not look like a path is a hub id; hub files are
looked up in the local Hugging Face cache by path only (never downloaded).
"""

from __future__ import annotations

import os
from pathlib import Path

BUNDLED_PREFIX = "bundled:"
ASSETS_DIR = Path(__file__).resolve().parent / "assets"


def bundled_path(reference: str) -> Path | None:
    """The path of a `bundled:` reference, or None when `reference` is not one."""
    if not reference.startswith(BUNDLED_PREFIX):
        return None
    return ASSETS_DIR / reference[len(BUNDLED_PREFIX):].lstrip("/")


def resolve(reference: str, base_dir: Path | None = None) -> Path:
    """The path `reference` names under the rule above (it may not exist)."""
    bundled = bundled_path(reference)
    if bundled is not None:
        return bundled
    p = Path(reference).expanduser()
    if p.is_absolute():
        return p
    roots = [r for r in (base_dir, Path.cwd()) if r is not None]
    for root in roots:
        if (root / p).exists():
            return root / p
    return roots[0] / p


def looks_like_path(reference: str) -> bool:
    """Paths start with `.`, `/`, `~` or `bundled:`, or have more than one '/', which a hub id never has."""
    return reference.startswith((".", "/", "~", BUNDLED_PREFIX)) or reference.count("/") > 1 or "\\" in reference


def local_dir(reference: str, base_dir: Path | None = None) -> Path | None:
    """The local path a model reference names (it exists or looks like a path), else None: a hub id."""
    path = resolve(reference, base_dir)
    return path if path.exists() or looks_like_path(reference) else None


def hub_cache_file(repo_id: str, filename: str, revision: str | None = None) -> str | None:
    """A file of a hub model in the local HF cache, found by path (importing huggingface_hub costs ~60 ms)."""
    root = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = Path(root) / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (revision or "")
    candidate = repo / "snapshots" / commit / filename
    return str(candidate) if commit and candidate.is_file() else None
