"""The NOT VALID mark `grpo import` puts on a recipe it could not finish: a top-level `not_valid:` section (why,
and the command that finishes it). Every command that reads a recipe loads it through `loader`, which refuses a
marked one here; deleting the section by hand is how a user says "I know, use it as it is"."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError

KEY = "not_valid"
_MARK_LINE = re.compile(rf"^{KEY}\s*:", re.MULTILINE)
_PLACEHOLDER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\.\.\.")


def mark(problems: list[str], finish: str | None) -> dict[str, Any]:
    """The section as the importer writes it. `${` is escaped so that OmegaConf leaves the text as it is."""
    section: dict[str, Any] = {"why": [p.replace("${", "\\${") for p in problems]}
    if finish:
        section["finish"] = finish.replace("${", "\\${")
    return section


def _reasons(section: Any) -> str:
    """The recorded reasons; a hand-edited mark's text where `why` is one string, or the section is."""
    why = section.get("why") if isinstance(section, dict) else section
    if isinstance(why, str):
        why = [why]
    reasons = [str(w).replace("\\${", "${") for w in why] if isinstance(why, list) else []
    return "; ".join(r.rstrip(".") for r in reasons if r.strip()) or "no reason recorded"


def _finish_command(section: Any) -> str | None:
    """The recorded finishing command, re-quoted, when it is a `grpo import` command (after the `NAME=...`
    placeholders it may start with); None otherwise. The mark is text in a file anyone can edit, and grpo offers
    only its own command to run: `$(...)` and the like come back quoted, inert."""
    finish = section.get("finish") if isinstance(section, dict) else None
    if not isinstance(finish, str):
        return None
    try:
        words = shlex.split(finish.replace("\\${", "${"))
    except ValueError:
        return None
    lead = 0
    while lead < len(words) and _PLACEHOLDER.fullmatch(words[lead]):
        lead += 1  # `NAME=...`: the launcher placeholders the user fills in
    if words[lead:lead + 2] != ["grpo", "import"]:
        return None
    return " ".join([*words[:lead], *(shlex.quote(w) for w in words[lead:])])


def refuse_marked(data: Any, source: str) -> None:
    """One paragraph for a recipe that carries the mark: what the import refused it for, and how to finish it."""
    if not isinstance(data, dict) or KEY not in data:
        return
    section = data[KEY]
    finish = _finish_command(section)
    step = f"Finish it with `{finish}`, or fix it by hand" if finish else "Fix it by hand"
    raise GrpoError(f"`grpo import` wrote this recipe marked not valid, and it is refused until that is settled: "
                    f"{_reasons(section)}", where=f"{source}: {KEY}" if source else KEY,
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
