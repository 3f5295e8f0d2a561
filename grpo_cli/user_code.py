"""References to the user's code (`module:name`, `file.py:name`): rewards, tools, environments and callbacks.

The one place such a reference is split, its source found without importing it (`find_module_file`: what
`grpo validate` reads with `ast`) and imported (`import_reference`). Layer 0, so every package that takes user code
uses it without reaching into another's. A file is imported once per path (under a private module name, its own
directory importable while it runs); a module is imported with the recipe's directory and the working directory on
the path. Every failure is a GrpoError naming the recipe key.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError, did_you_mean


def split_reference(ref: str) -> tuple[str, str]:
    target, func = ref.rsplit(":", 1)
    return target, func


def find_module_file(module: str, search: list[Path]) -> Path | None:
    """Locate a module's source without importing it (nor its parent packages)."""
    parts = module.split(".")
    paths = [str(p) for p in search] + sys.path
    spec = None
    for i, part in enumerate(parts):
        spec = importlib.machinery.PathFinder.find_spec(part, paths)
        if spec is None:
            if i == 0:
                spec = importlib.util.find_spec(part)  # built-in / frozen / meta-path modules
                if spec is None:
                    return None
            else:
                return None
        if i < len(parts) - 1:
            if not spec.submodule_search_locations:
                return None
            paths = list(spec.submodule_search_locations)
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def import_file(path: Path, where: str) -> Any:
    if path.is_dir():
        raise GrpoError(f"reward file {path} is a directory, not a file", where=where,
                        fix="Give the path of a .py file.")
    if not path.is_file():
        raise GrpoError(f"reward file {path} not found", where=where,
                        fix="Paths are relative to the recipe's directory.")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    mod_name = f"grpo_user_rewards.{path.stem}_{digest}"
    module = sys.modules.get(mod_name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise GrpoError(f"cannot import {path}", where=where, fix="Give a .py file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, str(path.parent))  # let the file import its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise GrpoError(f"importing {path} failed: {type(exc).__name__}: {exc}", where=where,
                        fix="Run `python " + str(path) + "` to see the full traceback.") from exc
    finally:
        sys.path.remove(str(path.parent))
    return module


def import_module(target: str, base_dir: Path, where: str) -> Any:
    for extra in (str(base_dir), str(Path.cwd())):
        if extra not in sys.path:
            sys.path.append(extra)
    try:
        return importlib.import_module(target)
    except ImportError as exc:
        raise GrpoError(f"cannot import module {target!r}: {exc}", where=where,
                        fix="Install the package, put the module beside the recipe, or use the "
                            "`path/to/file.py:func` form.") from exc
    except Exception as exc:
        raise GrpoError(f"importing module {target!r} failed: {type(exc).__name__}: {exc}", where=where) from exc


_WANTED: dict[str, Callable[[Any], bool]] = {"function": callable, "callable": callable, "class": inspect.isclass,
                                             "attribute": lambda obj: obj is not None}


def import_reference(ref: str, base_dir: Path, where: str, kind: str = "function") -> Any:
    """The object a `module:name` / `file.py:name` reference names (a reward, tool, environment or callback;
    files relative to `base_dir`), or a GrpoError naming `where`; `kind` is what it must be."""
    target, name = split_reference(ref)
    if target.endswith(".py"):
        module = import_file((base_dir / target).expanduser().resolve(), where)
    else:
        module = import_module(target, base_dir, where)
    obj = getattr(module, name, None)
    wanted = _WANTED[kind]
    if obj is None or not wanted(obj):
        names = [n for n, v in vars(module).items() if wanted(v) and not n.startswith("_")]
        guess = did_you_mean(name, names)
        raise GrpoError(f"{target} has no {kind} {name!r}", where=where,
                        fix=f"Did you mean `{guess}`?" if guess else f"Check the name after the ':' "
                        f"({kind}s there: {', '.join(sorted(names)) or 'none'}).")
    return obj
