"""Read the fields of the installed TRL's GRPOConfig without importing torch.

`GRPOConfig` is a dataclass that extends transformers' `TrainingArguments`. Importing
it pulls in torch (seconds), so instead we parse the source files of the installed
trl and transformers with `ast` and collect each field's name, type annotation,
default and help text. The result is cached on disk keyed by the files' paths and
modification times, so validation follows TRL releases and stays instant.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import json
import os
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from grpo_cli import trl_compat

# Which classes make up GRPOConfig, base first, in each package.
_SOURCES = [
    ("transformers", "training_args.py", "TrainingArguments"),
    ("trl", "trainer/base_config.py", "_BaseConfig"),
    ("trl", "trainer/grpo_config.py", "GRPOConfig"),
]
_NO_DEFAULT = "<required>"
# transformers enums whose string values a field typed `Enum | str` accepts.
_ENUM_SOURCES = ("trainer_utils.py", "training_args.py")


@dataclass(frozen=True)
class TrlField:
    """One GRPOConfig field as declared in the source."""

    name: str
    annotation: str
    default: Any
    help: str

    @property
    def kinds(self) -> frozenset[str]:
        """The plain JSON-ish kinds a value may have: bool, int, float, str, dict, list, null, any."""
        return _kinds(self.annotation)


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return _NO_DEFAULT
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ast.unparse(node)  # e.g. an enum member; shown as text


def _help_text(call: ast.Call) -> str:
    for kw in call.keywords:
        if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
            for key, value in zip(kw.value.keys, kw.value.values, strict=False):
                if isinstance(key, ast.Constant) and key.value == "help":
                    text = _literal(value)
                    return text if isinstance(text, str) else ""
    return ""


def _parse_class(path: Path, class_name: str) -> list[TrlField]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fields: list[TrlField] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name = stmt.target.id
            if name.startswith("_"):
                continue
            annotation = ast.unparse(stmt.annotation)
            if "ClassVar" in annotation:
                continue
            default: Any = _NO_DEFAULT
            help_text = ""
            value = stmt.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                for kw in value.keywords:
                    if kw.arg == "default":
                        default = _literal(kw.value)
                    elif kw.arg == "default_factory":
                        default = None
                help_text = _help_text(value)
            elif value is not None:
                default = _literal(value)
            fields.append(TrlField(name, annotation, default, " ".join(help_text.split())))
    return fields


def _cache_file(paths: list[Path]) -> Path:
    stamp = "|".join(f"{p}:{p.stat().st_mtime_ns}" for p in paths)
    key = hashlib.sha1(stamp.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "grpo-cli"
    return root / f"grpo-config-fields-{key}.json"


@cache
def enum_values() -> dict[str, list[str]]:
    """String values of transformers' enums (SchedulerType, OptimizerNames, ...), read from source."""
    base = _package_dir("transformers")
    out: dict[str, list[str]] = {}
    if base is None:
        return out
    sources = [base / rel for rel in _ENUM_SOURCES if (base / rel).exists()]
    cache_path = _cache_file(sources).with_name(_cache_file(sources).name.replace("grpo-config-fields", "enums"))
    try:
        return json.loads(cache_path.read_text())
    except (OSError, ValueError):
        pass
    for rel in _ENUM_SOURCES:
        path = base / rel
        if not path.exists():
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.ClassDef) or not any("Enum" in ast.unparse(b) for b in node.bases):
                continue
            values = [stmt.value.value for stmt in node.body if isinstance(stmt, ast.Assign)
                      and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)]
            if values:
                out[node.name] = values
    with contextlib.suppress(OSError):
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(out))
        tmp.replace(cache_path)
    return out


def accepted_values(field: TrlField) -> list[str] | None:
    """The enum values a field accepts when its annotation names a transformers enum, else None."""
    enums = enum_values()
    for name in (n.strip() for n in field.annotation.replace("|", " ").split()):
        if name in enums:
            return enums[name]
    return None


@cache
def grpo_config_fields() -> dict[str, TrlField]:
    """All GRPOConfig fields of the installed TRL, by name (later classes override earlier)."""
    paths: list[tuple[Path, str]] = []
    for package, rel, class_name in _SOURCES:
        base = _package_dir(package)
        if base is None or not (base / rel).exists():
            return {}
        paths.append((base / rel, class_name))
    cache_path = _cache_file([p for p, _ in paths])
    try:
        raw = json.loads(cache_path.read_text())
        return {k: TrlField(**v) for k, v in raw.items()}
    except (OSError, ValueError, TypeError):
        pass
    merged: dict[str, TrlField] = {}
    for path, class_name in paths:
        for f in _parse_class(path, class_name):
            merged[f.name] = f
    try:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in merged.items()}))
        tmp.replace(cache_path)
    except OSError:
        pass  # a read-only home only costs us the cache
    return merged


def _kinds(annotation: str) -> frozenset[str]:
    """Map a field's annotation text to the kinds of YAML values it accepts."""
    try:
        node = ast.parse(annotation, mode="eval").body
    except SyntaxError:
        return frozenset({"any"})
    out: set[str] = set()

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr):
            visit(n.left)
            visit(n.right)
        elif isinstance(n, ast.Constant):
            out.add("null" if n.value is None else "str")
        elif isinstance(n, ast.Subscript):
            head = ast.unparse(n.value).split(".")[-1]
            if head in ("Optional",):
                out.add("null")
                visit(n.slice)
            elif head == "Union":
                elts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
                for e in elts:
                    visit(e)
            elif head in ("list", "List", "tuple", "Tuple", "Sequence"):
                out.add("list")
            elif head in ("dict", "Dict", "Mapping"):
                out.add("dict")
            elif head == "Literal":
                out.add("str")
            else:
                out.add("any")
        else:
            name = ast.unparse(n).split(".")[-1]
            mapping = {"bool": "bool", "int": "int", "float": "float", "str": "str", "dict": "dict",
                       "list": "list", "None": "null"}
            # Enums such as IntervalStrategy or SchedulerType accept their string values.
            out.add(mapping.get(name, "str" if name[:1].isupper() and name != "Any" else "any"))

    visit(node)
    return frozenset(out)


def json_schema_for(field: TrlField) -> dict[str, Any]:
    """A JSON Schema fragment for one field, used by `grpo schema` and the docs."""
    names = {"bool": "boolean", "int": "integer", "float": "number", "str": "string", "dict": "object",
             "list": "array", "null": "null"}
    kinds = field.kinds
    schema: dict[str, Any] = {}
    if "any" not in kinds:
        types = sorted({names[k] for k in kinds})
        schema["type"] = types[0] if len(types) == 1 else types
    if field.default != _NO_DEFAULT and isinstance(field.default, (bool, int, float, str, type(None), list)):
        schema["default"] = field.default
    if field.help:
        schema["description"] = field.help
    return schema


@cache
def async_grpo_config_names() -> frozenset[str]:
    """The fields the installed TRL's AsyncGRPOConfig takes, read from source (empty if it has none)."""
    names: set[str] = set()
    own = ("trl", *trl_compat.async_config_source())  # where the installed TRL keeps it (moved in 1.18)
    for package, rel, class_name in (*_SOURCES[:2], own):  # TrainingArguments and _BaseConfig, then its own
        base = _package_dir(package)
        if base is None or not (base / rel).exists():
            return frozenset()
        names.update(f.name for f in _parse_class(base / rel, class_name))
    return frozenset(names)
