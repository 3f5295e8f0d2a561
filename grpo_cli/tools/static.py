"""What `grpo validate` checks about tools and environments without importing them (nor torch).

transformers builds the JSON schema the model sees from a tool's type hints and its
Google-style docstring (`Args:` with one line per parameter) and raises at trainer init
when either is missing; TRL additionally needs environments with a `reset`, a chat
template that renders tool calls and is prefix-preserving, and transformers >= 5.0
(tools) / 5.2 (environments). All of that is read here from source and config files.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError, Problem, did_you_mean
from grpo_cli.findings import Findings
from grpo_cli.paths import read_text
from grpo_cli.user_code import find_module_file, split_reference

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

TRANSFORMERS_FLOOR_TOOLS = "5.0.0"
TRANSFORMERS_FLOOR_ENVIRONMENTS = "5.2.0"
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:", re.MULTILINE)
_DOC_FIX = ('Write a Google-style docstring: a one-line summary, then\n    Args:\n        a: what `a` is\n'
            '(transformers builds the JSON schema the model sees from it).')


@dataclass(kw_only=True)
class ToolCheck(Findings):
    """What validate learned: problems, warnings, and the plan's `tools` line (one part per tool/environment)."""

    lines: list[str] = field(default_factory=list)
    tool_names: dict[str, str] = field(default_factory=dict)
    """Name the model calls -> the recipe key that defines it (TRL keeps only the last of two same names)."""
    rewarding: dict[str, bool | None] = field(default_factory=dict)
    """Environment class -> whether it defines get_reward (None: it inherits, so that is known only at load)."""

    def claim(self, name: str, where: str, others: dict[str, str] | None = None) -> None:
        """Record a tool name; a second tool of the same name is a problem."""
        first = (others if others is not None else self.tool_names).get(name)
        if first is not None:
            self.problems.append(Problem(where, f"the tool name {name!r} is already used by {first}; TRL keeps only "
                                         "one of two tools with the same name, so the model could never call the "
                                         "other", "Rename one of them (the model sees the function's name)."))
        elif others is None:
            self.tool_names[name] = where


def _source_tree(ref: str, base_dir: Path, where: str, out: ToolCheck) -> tuple[Path | None, ast.Module | None]:
    target, _ = split_reference(ref)
    if target.endswith(".py"):
        path = (base_dir / target).expanduser()
        if not path.exists():
            out.problems.append(Problem(where, f"file {target} not found (looked at {path})",
                                        "Paths are relative to the recipe's directory."))
            return None, None
    else:
        found = find_module_file(target, [base_dir, Path.cwd()])
        if found is None:
            import importlib.util

            if importlib.util.find_spec(target.split(".")[0]) is None:
                out.problems.append(Problem(where, f"module {target!r} cannot be found",
                                            "Install the package, put the module beside the recipe, or use the "
                                            "`path/to/file.py:name` form."))
            else:
                out.warnings.append(f"{where}: {ref} is not a plain .py module; it is checked when training loads it")
            return None, None
        path = found
    try:
        return path, ast.parse(read_text(path, what="tool file", where=where), filename=str(path))
    except GrpoError as exc:  # binary, not UTF-8, a directory, unreadable
        out.problems.extend(exc.problems)
        return None, None
    except SyntaxError as exc:
        out.problems.append(Problem(where, f"{path} has a syntax error at line {exc.lineno}: {exc.msg}"))
        return None, None


def _check_callable(node: ast.FunctionDef | ast.AsyncFunctionDef, label: str, where: str, bound: set[str],
                    out: ToolCheck, method: bool = False) -> list[str]:
    """Type hints and docstring as transformers' get_json_schema needs them; returns the visible parameters."""
    a = node.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if method and params:
        params = params[1:]  # self
    if a.vararg or a.kwarg:
        star = f"*{a.vararg.arg}" if a.vararg else f"**{a.kwarg.arg}"  # type: ignore[union-attr]
        out.problems.append(Problem(where, f"{label} takes {star}: the model calls a tool with named arguments "
                                    "from its JSON schema, which cannot describe it",
                                    "List every argument explicitly, with a type hint."))
    visible = [p for p in params if p.arg not in bound]
    unhinted = [p.arg for p in visible if p.annotation is None]
    if unhinted:
        out.problems.append(Problem(where, f"{label} has no type hint for {', '.join(unhinted)}; transformers needs "
                                    "one per argument to build the tool's JSON schema",
                                    f"Annotate them, e.g. `def {node.name}({unhinted[0]}: int, ...)`."))
    doc = ast.get_docstring(node)
    if not doc:
        out.problems.append(Problem(where, f"{label} has no docstring: the model would see no description", _DOC_FIX))
        return [p.arg for p in visible]
    if visible:
        section = re.search(r"^\s*Args:\s*\n(.*?)(?:^\s*(?:Returns|Raises|Yields|Examples?):|\Z)", doc,
                            re.DOTALL | re.MULTILINE)
        if section is None:
            out.problems.append(Problem(where, f"{label}'s docstring has no `Args:` section", _DOC_FIX))
        else:
            described = set(_ARG_LINE.findall(section.group(1)))
            missing = [p.arg for p in visible if p.arg not in described]
            if missing:
                out.problems.append(Problem(where, f"{label}'s docstring does not describe {', '.join(missing)} "
                                            "under `Args:`", f"Add a line `    {missing[0]}: <what it is>`."))
    return [p.arg for p in visible]


def check_tool(entry: Any, base_dir: Path, index: int, out: ToolCheck) -> None:
    where = f"tools[{index}].function"
    path, tree = _source_tree(entry.function, base_dir, where, out)
    if tree is None:
        return
    name = entry.name
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if name not in defs:
        imported = {(al.asname or al.name) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                    for al in n.names}
        if name in imported:
            out.warnings.append(f"{where}: {name} is imported into {path}; it is checked when training loads it")
            return
        _not_defined(out, where, path, "function", name, list(defs))
        return
    node = defs[name]
    all_params = {p.arg for p in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
    for key in entry.params:
        if key not in all_params:
            out.problems.append(Problem(f"tools[{index}].params.{key}", f"{key!r} is not a parameter of {name}",
                                        f"Its parameters are: {', '.join(sorted(all_params)) or 'none'}."))
    out.claim(name, where)
    visible = _check_callable(node, f"tool {name!r}", where, set(entry.params), out)
    kind = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
    limit = f", timeout {entry.timeout:g} s" if entry.timeout else ", no timeout"
    out.lines.append(f"{kind}{name}({', '.join(visible)}){limit}")


def _not_defined(out: ToolCheck, where: str, path: Path | None, kind: str, name: str, defined: list[str]) -> None:
    """The problem for a reference naming a function or class its file does not define (with a guess)."""
    guess = did_you_mean(name, defined)
    listed = "Classes" if kind == "class" else "Functions"
    out.problems.append(Problem(where, f"{path} has no {kind} {name!r}", f"Did you mean `{guess}`?" if guess else
                                f"{listed} defined there: {', '.join(sorted(defined)) or 'none'}."))


def _check_params(node: ast.ClassDef, methods: dict[str, Any], inherits: bool, params: dict[str, Any],
                  where: str, out: ToolCheck) -> None:
    """Constructor arguments from `environment.params` that `__init__` does not take (what a tool's params get)."""
    init = methods.get("__init__")
    if init is None and inherits:
        return  # an inherited __init__: checked when training constructs it
    names: set[str] = set()
    if init is not None:
        if init.args.kwarg is not None:
            return
        names = {p.arg for p in [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs][1:]}
    for key in params:
        if key not in names:
            out.problems.append(Problem(f"{where}.{key}", f"{key!r} is not a parameter of {node.name}.__init__",
                                        f"Its parameters are: {', '.join(sorted(names)) or 'none'}."))


def check_environment_class(ref: str, base_dir: Path, where: str, out: ToolCheck,
                            params: dict[str, Any] | None = None, params_where: str = "environment.params") -> None:
    path, tree = _source_tree(ref, base_dir, where, out)
    if tree is None:
        return
    _, name = split_reference(ref)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if name not in classes:
        _not_defined(out, where, path, "class", name, list(classes))
        return
    node = classes[name]
    inherits = any(not (isinstance(b, ast.Name) and b.id == "object") for b in node.bases)
    methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    public = [m for m in methods if not m.startswith("_") and m not in ("reset", "get_reward")]
    _check_params(node, methods, inherits, params or {}, params_where, out)
    if "reset" not in methods and not inherits:
        out.problems.append(Problem(where, f"environment {name} has no `reset` method; TRL calls it to start "
                                    "every rollout", "Add `def reset(self, **kwargs) -> str | None:` (it receives "
                                    "the row's columns and may return text appended to the prompt)."))
    elif "reset" in methods and methods["reset"].args.kwarg is None:
        out.problems.append(Problem(where, f"{name}.reset does not accept **kwargs, but TRL calls it with every "
                                    "column of the row (reset(**row))", "Add `**kwargs` to its signature."))
    if not public and not inherits:
        out.problems.append(Problem(where, f"environment {name} has no public method for the model to call",
                                    "Add at least one method (type hints and an `Args:` docstring) that is not "
                                    "reset/get_reward and does not start with `_`."))
    for m in public:
        out.claim(m, f"{where} ({name}.{m})", others=out.tool_names)  # each environment's methods join `tools:`
        _check_callable(methods[m], f"{name}.{m}", where, set(), out, method=True)
    if inherits:
        out.warnings.append(f"{where}: {name} inherits from another class; inherited methods are checked when "
                            "training loads it (`grpo check-tools` shows them)")
    reward = ", owns a reward (get_reward)" if "get_reward" in methods else ""
    out.rewarding[name] = True if "get_reward" in methods else None if inherits else False
    out.lines.append(f"{name}: tools {', '.join(public) or '(inherited)'}{reward}")


def check_tools(recipe: Recipe, columns: list[str] | None) -> ToolCheck:
    """Every static tool/environment check of the preflight (nothing to check without tools or an environment;
    the preflight warns about tool settings in such a recipe itself)."""
    out = ToolCheck()
    if not recipe.tools and recipe.environment is None:
        return out
    for i, entry in enumerate(recipe.tools):
        check_tool(entry, recipe.base_dir, i, out)
    env = recipe.environment
    if env is not None:
        for name, ref in env.classes().items():
            check_environment_class(ref, recipe.base_dir, "environment.factory" + (f".{name}" if name else ""), out,
                                    env.params_for(name), "environment.params" + (f".{name}" if name else ""))
        if env.routed and columns is not None and "environment" not in columns:
            out.problems.append(Problem("environment.factory", "several environments are routed by the dataset's "
                                        "`environment` column, which the data does not have "
                                        f"(columns: {', '.join(columns)})",
                                        f"Add an `environment` column naming one of {', '.join(env.factory)} per "
                                        "row (and keep it in data.keep_columns), or give a single class."))
    if env is not None:
        environment_only_checks(recipe, out)
    if not recipe.data.prompt.chat:
        what = ("tools need chat prompts: TRL only parses tool calls out of conversational completions")
        if recipe.data.prompt.template is not None:
            out.problems.append(Problem("data.prompt.chat", what, "Set `chat: true` under data.prompt."))
        else:  # a column may already hold message lists
            out.warnings.append(f"data.prompt.chat: {what}; make sure data.prompt.column holds message lists "
                                "or set `chat: true`")
    version_checks(recipe, out)
    local = recipe.local_model_dir(recipe.model.name_or_path)
    if local is not None and local.is_file():  # a GGUF file: its converted directory, when converted already
        from grpo_cli.gguf.cache import cached_conversion

        local = cached_conversion(local)
    if local is not None and (local / "config.json").exists():
        from grpo_cli.tools.template import check_template

        check_template(local, out)
    if out.lines:
        out.plan["tools"] = "; ".join(out.lines)
    return out


def environment_only_checks(recipe: Recipe, out: ToolCheck) -> None:
    """What TRL needs when the environment serves the prompts or owns the only reward (GRPOTrainer.__init__)."""
    env = recipe.environment
    if not recipe.rewards and False in out.rewarding.values():
        names = ", ".join(n for n, r in out.rewarding.items() if r is False)
        out.problems.append(Problem("rewards", f"the recipe has no `rewards` and environment {names} defines no "
                                    "get_reward, so no rollout would be scored (TRL refuses: 'No reward source "
                                    "provided')", "Add `def get_reward(self) -> float:` to the environment (it is "
                                    "called once per finished rollout), or list `rewards:`."))
    if not recipe.data.from_environment:
        return
    if env is not None and env.routed:
        out.problems.append(Problem("data", "several environments are routed by each row's `environment` column, "
                                    "but the recipe has no data rows (TRL needs a dataset to route them)",
                                    "Give `data:` rows with an `environment` column, or a single environment "
                                    "class whose reset() serves the prompts."))
    steps = recipe.training.max_steps
    if not isinstance(steps, int) or steps <= 0:
        out.problems.append(Problem("training.max_steps", "the recipe has no data rows (the environment serves the "
                                    "prompts), so there is no epoch to count: training needs a number of steps",
                                    "Set `training.max_steps` (e.g. 50), as TRL requires without a train dataset."))


def version_checks(recipe: Recipe, out: ToolCheck, installed: str | None = None) -> None:
    """TRL's transformers floors for tools and environments (`installed`: the version to judge; default: real)."""
    from importlib.metadata import PackageNotFoundError, version

    if installed is None:
        try:
            installed = version("transformers")
        except PackageNotFoundError:
            return
    from packaging.version import Version

    if recipe.tools and Version(installed) < Version(TRANSFORMERS_FLOOR_TOOLS):
        out.problems.append(Problem("tools", f"TRL needs transformers >= {TRANSFORMERS_FLOOR_TOOLS} for tools; "
                                    f"{installed} is installed", "pip install -U 'transformers>=5.2'"))
    if recipe.environment is not None and Version(installed) < Version(TRANSFORMERS_FLOOR_ENVIRONMENTS):
        out.problems.append(Problem("environment", f"TRL needs transformers >= {TRANSFORMERS_FLOOR_ENVIRONMENTS} "
                                    f"for environments; {installed} is installed",
                                    "pip install -U 'transformers>=5.2'"))
