"""What may leave this machine in a push: no local paths, and no smoke test passed off as a benchmark result.

A LoRA run on a local base model writes that model's absolute path into adapter_config.json (PEFT
records `model.name_or_path`), and the manifest and recipe name local files; none of that means
anything on the Hub and it tells strangers about this machine. A `grpo eval --suite NAME --limit 50`
is a smoke test: the card shows it as one, and the Hub's model-index gets only full-suite results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.paths import is_hub_id


def is_local_path(value: str) -> bool:
    """An absolute or home-relative path, or one that exists here (a Hub id such as `org/name` is not)."""
    if not value or value.startswith("bundled:"):
        return False
    if value.startswith(("/", "~", "./", "../")) or (len(value) > 2 and value[1] == ":" and value[2] in "/\\"):
        return True
    return not is_hub_id(value, owner=True) and Path(value).exists()


def public_base(base: str, hub_id: str | None = None) -> str:
    """How a card and adapter_config.json name the base model: a Hub id, `bundled:NAME`, else the folder's name."""
    if hub_id:
        return hub_id
    if is_local_path(base):
        return Path(base.rstrip("/\\")).name or "local-model"
    return base


def scrub(value: Any) -> Any:
    """A copy of a JSON/YAML value with every local path replaced by its last component."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str) and is_local_path(value) and "\n" not in value:
        return Path(value.rstrip("/\\")).name
    return value


def local_paths(value: Any) -> list[str]:
    """The local paths a JSON/YAML value holds, in order."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in local_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in local_paths(v)]
    return [value] if isinstance(value, str) and "\n" not in value and is_local_path(value) else []


def is_full_suite(summary: dict[str, Any]) -> bool:
    """Whether a suite summary covers every problem of the suite (only those are Hub results)."""
    size, problems = summary.get("suite_size"), summary.get("problems")
    return isinstance(size, int) and problems == size


def sanitized(path: Path) -> tuple[bytes, list[str]]:
    """The JSON or YAML file with local paths scrubbed, and the paths that were there. A file that is not valid
    UTF-8 JSON/YAML would be uploaded as junk (or crash the scrubbing): one paragraph naming it instead."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
            return (json.dumps(scrub(data), indent=2) + "\n").encode(), local_paths(data)
        data = yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        why = exc.strerror if isinstance(exc, OSError) else str(exc).splitlines()[0][:120]
        raise GrpoError(f"{path} is damaged: not readable UTF-8 {kind} ({why})", where="RUN_DIR",
                        fix=f"It would be uploaded with the model: restore it from a copy, or delete {path.name} "
                            "(the upload then goes without it).") from None
    return yaml.safe_dump(scrub(data), sort_keys=False).encode(), local_paths(data)
