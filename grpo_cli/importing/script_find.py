"""Finding the TrlParser script a YAML belongs to: a .py near the YAML (its directory, its parent's tree) that
parses its arguments with TrlParser and reads the YAML's own keys (`script_args.dataset_id_or_path`)."""

from __future__ import annotations

from pathlib import Path

LIMIT = 400
"""Python files looked at, at most (a repository's scripts, not a virtual environment)."""


def trlparser_scripts(config: Path, keys: list[str]) -> list[Path]:
    """Scripts near `config` that use TrlParser and read one of `keys`, nearest first, relative to the cwd."""
    found: list[Path] = []
    seen = 0
    for root in (config.parent, config.parent.parent):
        for path in sorted(root.rglob("*.py")):
            if any(part.startswith(".") or part in ("site-packages", "node_modules") for part in path.parts):
                continue
            seen += 1
            if seen > LIMIT:
                return found
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "TrlParser" in text and any(key in text for key in keys) and path not in found:
                found.append(path)
        if found:
            break
    return found
