"""The NOT VALID mark `grpo import` puts on a recipe it could not finish: a top-level `not_valid:` section (why,
and the command that finishes it). Every command that reads a recipe loads it through `loader`, which refuses a
marked one here; deleting the section by hand is how a user says "I know, use it as it is"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError

KEY = "not_valid"
_MARK_LINE = re.compile(rf"^{KEY}\s*:", re.MULTILINE)


def mark(problems: list[str], finish: str | None) -> dict[str, Any]:
    """The section as the importer writes it. `${` is escaped so that OmegaConf leaves the text as it is."""
    section: dict[str, Any] = {"why": [p.replace("${", "\\${") for p in problems]}
    if finish:
        section["finish"] = finish.replace("${", "\\${")
    return section


def refuse_marked(data: Any, source: str) -> None:
    """One paragraph for a recipe that carries the mark: what the import refused it for, and how to finish it."""
    if not isinstance(data, dict) or KEY not in data:
        return
    section = data[KEY]
    why = section.get("why") if isinstance(section, dict) else None
    finish = section.get("finish") if isinstance(section, dict) and isinstance(section.get("finish"), str) else None
    reasons = [str(w).replace("\\${", "${") for w in why] if isinstance(why, list) else []
    text = "; ".join(r.rstrip(".") for r in reasons if r.strip()) or "no reason recorded"
    step = (f"Finish it with `{str(finish).replace(chr(92) + '${', '${')}`, or fix it by hand" if finish
            else "Fix it by hand")
    raise GrpoError(f"`grpo import` wrote this recipe marked not valid, and it is refused until that is settled: "
                    f"{text}", where=f"{source}: {KEY}" if source else KEY,
                    fix=f"{step}; when you accept the recipe as it is, delete its `{KEY}:` section (that is how "
                        "you tell grpo you know).")


def refuse_marked_file(path: Path) -> None:
    """The mark read straight from the file, before `extends`, `${...}` or overrides are resolved: a marked recipe
    is refused for its mark, not for whatever else the import left unfinished."""
    try:
        if not path.is_file():  # a device or a pipe would be read forever; the loader refuses it in one paragraph
            return
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # the loader says what is wrong with the file
    if not _MARK_LINE.search(text):
        return
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    refuse_marked(data, str(path))
