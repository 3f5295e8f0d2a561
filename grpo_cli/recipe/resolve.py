"""A recipe through OmegaConf: `extends` chains, `${...}` interpolation, command-line overrides, YAML errors.

Imported only for a recipe that needs it, or to explain a YAML error: a recipe without `extends`, `${`
and overrides is read by `plain_yaml` with OmegaConf's rules, without importing OmegaConf (a tenth of
`grpo validate`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

from grpo_cli.errors import GrpoError
from grpo_cli.paths import read_text
from grpo_cli.recipe.marked import refuse_marked_file

_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*(?:(?:\.[A-Za-z0-9_]+)|(?:\[\d+\]))*)=(?P<value>.*)$",
                       re.DOTALL)


def _read_yaml(path: Path) -> DictConfig:
    text = read_text(path, what="recipe file", where=str(path),
                     missing_fix="Check the path; the bundled recipes are in recipes/ (e.g. recipes/demo.yaml).")
    if not text.strip():
        raise GrpoError("the recipe file is empty", where=str(path),
                        fix="Start from one of the bundled recipes, e.g. recipes/demo.yaml.")
    try:
        cfg = OmegaConf.create(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, path, text) from None
    except OmegaConfBaseException as exc:
        raise GrpoError(f"cannot be read as a recipe: {exc}", where=str(path)) from None
    if not isinstance(cfg, DictConfig):
        raise GrpoError("the top level must be a mapping of sections (model, data, rewards, ...)",
                        where=str(path), fix="See docs/recipes.md for the layout.")
    return cfg


_QUOTED_VALUE = re.compile(r"""^\s*(?:-\s+)?(?:[^\s#'"{\[][^#]*?:\s+)?(?P<q>["'])(?P<rest>.*)$""")


def _closes(quote: str, rest: str) -> bool:
    """Whether a scalar opened with `quote` ends within `rest` (the remainder of its line)."""
    if quote == "'":
        return "'" in rest.replace("''", "")
    escaped = False
    for char in rest:
        if char == '"' and not escaped:
            return True
        escaped = char == "\\" and not escaped
    return False


def _unclosed_quote(text: str, upto: int) -> tuple[int, int] | None:
    """(line, column) of the first quoted value before line `upto` that its own line does not close.

    YAML lets a quoted string run over several lines, so PyYAML reports a forgotten closing quote
    only where the string finally ends, often many lines later.
    """
    for number, line in enumerate(text.splitlines()[:upto], 1):
        match = _QUOTED_VALUE.match(line)
        if match and not _closes(match["q"], match["rest"]):
            return number, match.start("q") + 1
    return None


def _tab_in_indentation(text: str, upto: int | None) -> tuple[int, int] | None:
    """(line, column) of the first tab in a line's leading whitespace, up to the line PyYAML stopped at.

    PyYAML says "found character that cannot start any token" for most of them, which does not say tab.
    """
    for number, line in enumerate(text.splitlines()[:upto], 1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip():
            return number, indent.index("\t") + 1
    return None


def _yaml_error(exc: yaml.YAMLError, path: Path, text: str) -> GrpoError:
    """One located paragraph for a YAML error: alias bombs, unclosed quotes, then PyYAML's own mark."""
    message = str(exc)
    if "expansion exceeds" in message or "max_yaml_expanded_nodes" in message:
        return GrpoError("the recipe expands its YAML aliases (*name) into more than 10,000 values; that is "
                         "an alias bomb, not a recipe", where=str(path),
                         fix="Use anchors and aliases sparingly (a recipe needs a handful), or write values out.")
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or message.splitlines()[0]
    quote = _unclosed_quote(text, mark.line + 1) if mark else None
    if quote is not None and mark is not None and quote[0] <= mark.line + 1:
        line, column = quote
        return GrpoError(f"YAML syntax error: the quote opened here is not closed on its line, so YAML reads "
                         f"on to the next quote and fails at line {mark.line + 1} ({problem})",
                         where=f"{path}:{line}:{column}", fix="Close the quote at the end of the value, or drop it.")
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    tab = _tab_in_indentation(text, mark.line + 1 if mark else None)
    if tab is not None:
        return GrpoError(f"YAML syntax error: a tab in the indentation of line {tab[0]}; YAML indents with spaces "
                         "only", where=f"{path}:{tab[0]}:{tab[1]}",
                         fix="Replace the tab with spaces (most editors: 'convert indentation to spaces').")
    return GrpoError(f"YAML syntax error: {problem}", where=where,
                     fix="Fix the indentation or quoting at that line (strings with ':' or '#' need quotes).")


def _load_chain(path: Path, stack: tuple[Path, ...]) -> DictConfig:
    """Load `path` and everything it `extends`, base first; reject cycles."""
    path = path.resolve()
    if path in stack:
        chain = " -> ".join(str(p.name) for p in (*stack, path))
        raise GrpoError(f"circular `extends`: {chain}", where=str(stack[-1]),
                        fix="Remove the `extends` that points back to a recipe already in the chain.")
    cfg = _read_yaml(path)
    parents = cfg.pop("extends", None)
    if parents is None:
        return cfg
    if isinstance(parents, str):
        parents = [parents]
    elif not (OmegaConf.is_list(parents) and all(isinstance(p, str) for p in parents)):
        raise GrpoError("`extends` must be a path or a list of paths", where=f"{path}: extends")
    merged = OmegaConf.create({})
    for parent in parents:
        parent_path = (path.parent / parent).expanduser()
        if not parent_path.exists():
            raise GrpoError(f"`extends: {parent}` points to a missing file ({parent_path})", where=str(path),
                            fix="Paths in `extends` are relative to the recipe that names them.")
        refuse_marked_file(parent_path)  # the mark named in the base that carries it, where it is deleted
        merged = cast(DictConfig, OmegaConf.merge(merged, _load_chain(parent_path, (*stack, path))))
    return cast(DictConfig, OmegaConf.merge(merged, cfg))


def _override_value(item: str) -> Any:
    """The YAML value of one `key=value` override; a GrpoError naming the override when it does not parse."""
    value = item.split("=", 1)[1]
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"v={value}"]), resolve=False)
        return parsed["v"] if isinstance(parsed, dict) else None
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise GrpoError(f"override {item!r}: the value is not valid YAML ({problem})", where="command line",
                        fix="Close the bracket or brace, or quote the whole value as a string, "
                            "e.g. 'data.prompt.template=\"Q: {question}\"'.") from None


def parse_overrides(overrides: list[str]) -> DictConfig:
    """Turn `section.key=value` strings into a config; reject anything else with a clear error.

    List elements (`rewards[0].weight=2`) cannot be expressed as a config to merge; `apply_overrides`
    sets them in place.
    """
    for item in overrides:
        if not _OVERRIDE.match(item):
            raise GrpoError(
                f"override {item!r} is not of the form section.key=value", where="command line",
                fix="Write e.g. `training.learning_rate=1e-5` or `model.lora.r=8` (no spaces around '=').",
            )
        _override_value(item)
    try:
        return OmegaConf.from_dotlist([o for o in overrides if "[" not in o.split("=", 1)[0]])
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        raise GrpoError(f"cannot parse overrides: {exc}", where="command line") from None


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """`cfg` with the overrides applied in order; list elements are addressed as `rewards[0].weight`."""
    for item in overrides:  # `rewards.0.weight`: a list index written as a key, which merging cannot place
        key = item.split("=", 1)[0]
        parts = key.split(".")
        for i, part in enumerate(parts[1:], start=1):
            if part.isdigit():
                fixed = ".".join(parts[:i]) + f"[{part}]" + "".join(f".{p}" for p in parts[i + 1:])
                raise GrpoError(f"override {item!r} addresses a list entry with a dot", where="command line",
                                fix=f"Write list indices in brackets: `{fixed}={item.split('=', 1)[1]}`.")
    plain = parse_overrides(overrides)
    cfg = cast(DictConfig, OmegaConf.merge(cfg, plain))
    for item in overrides:
        key = item.split("=", 1)[0]
        if "[" not in key:
            continue
        _check_indices(cfg, key, item)
        # `rewards[0]={...}` replaces the entry; `rewards[0].params={...}` merges into the params, like `a.b={...}`.
        OmegaConf.update(cfg, key, _override_value(item), merge=not key.endswith("]"))
    return cfg


def _check_indices(cfg: DictConfig, key: str, item: str) -> None:
    """Every `[i]` in `key` must address an existing list element (a new one cannot be made up)."""
    node: Any = cfg
    path = ""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        if part.startswith("["):
            index = int(part[1:-1])
            if not OmegaConf.is_list(node):
                raise GrpoError(f"override {item!r}: {path} is not a list", where="command line",
                                fix=f"Write `{path}.KEY=VALUE` for a mapping.")
            if index >= len(node):
                count = f"{len(node)} entr{'y' if len(node) == 1 else 'ies'}"
                raise GrpoError(f"override {item!r}: {path} has {count}, so there is no index {index}",
                                where="command line",
                                fix=f"Use an index from 0 to {len(node) - 1}, or replace the whole list "
                                    f"(`{path}=[...]`).")
            node = node[index]
        else:
            node = node.get(part) if OmegaConf.is_dict(node) else None
            if node is None:
                return  # a new key: OmegaConf.update creates it, validation judges it
        path += part if part.startswith("[") or not path else f".{part}"


def resolve_with_omegaconf(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The recipe as a plain dict: extends merged, overrides applied, ${...} resolved."""
    path = Path(path)
    cfg = _load_chain(path, ())
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except InterpolationKeyError as exc:
        key = getattr(exc, "full_key", "") or ""
        missing = re.search(r"key '([^']+)'", str(exc))
        ref = missing.group(1) if missing else "?"
        raise GrpoError(f"${{{ref}}} refers to the recipe key {ref!r}, which does not exist",
                        where=f"{path}: {key}" if key else str(path),
                        fix="Interpolations name another key of the resolved recipe, e.g. "
                            "${training.learning_rate}: check the spelling and the section.") from None
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        raise GrpoError(f"cannot resolve an interpolation: {getattr(exc, 'msg', exc)}",
                        where=f"{path}: {key}" if key else str(path),
                        fix="Set the environment variable or give a default: ${oc.env:NAME,default}.") from None
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}
