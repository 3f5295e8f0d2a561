"""Find, check and load reward functions.

Two paths: `inspect_reward` reads a reference statically (ast, no import, no side
effects) so `grpo validate` stays instant and safe; `load_reward` imports it for
training and wraps it so TRL sees the recipe's label and bound params.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError, RewardTimeoutError, did_you_mean
from grpo_cli.paths import local_dir, read_text
from grpo_cli.recipe.schema.rewards import RewardEntry
from grpo_cli.rewards.registry import builtin_names, get_builtin, required_columns
from grpo_cli.rewards.sources import reexported, trains_at_import
from grpo_cli.user_code import find_module_file, import_reference, split_reference

# Keyword arguments TRL passes to every reward function besides the dataset columns.
TRL_KWARGS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


@dataclass
class RewardInfo:
    """What the preflight learned about one reward without importing it."""

    label: str
    kind: str
    target: str
    columns: list[tuple[str, ...]] = field(default_factory=list)
    """Dataset columns the reward needs; each tuple lists alternatives."""
    is_async: bool = False
    note: str = ""


@dataclass
class _Signature:
    params: dict[str, bool]  # name -> has default
    var_kwargs: bool
    positional_only: list[str]
    is_async: bool


def _ast_signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> _Signature:
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    n_defaults = len(a.defaults)
    params: dict[str, bool] = {}
    for i, arg in enumerate(positional):
        params[arg.arg] = i >= len(positional) - n_defaults
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params[arg.arg] = default is not None
    return _Signature(params, a.kwarg is not None, [x.arg for x in a.posonlyargs],
                      isinstance(node, ast.AsyncFunctionDef))


def _static_function(entry: RewardEntry, base_dir: Path, where: str) -> tuple[str, _Signature | None]:
    assert entry.function is not None
    target, func = split_reference(entry.function)
    if target.endswith(".py"):
        path = (base_dir / target).expanduser()
        if not path.exists():
            raise GrpoError(f"reward file {target} not found (looked at {path})", where=f"{where}.function",
                            fix="Paths are relative to the recipe's directory.")
    else:
        found = find_module_file(target, [base_dir, Path.cwd()])
        if found is None:
            if importlib.util.find_spec(target.split(".")[0]) is None:
                raise GrpoError(f"module {target!r} cannot be found", where=f"{where}.function",
                                fix="Install the package, put the module beside the recipe, or use the "
                                    "`path/to/file.py:func` form.")
            return target, None  # compiled or namespace module: checked at load time
        path = found
    try:
        tree = ast.parse(read_text(path, what="reward file", where=f"{where}.function"), filename=str(path))
    except SyntaxError as exc:
        raise GrpoError(f"{path} has a syntax error at line {exc.lineno}: {exc.msg}",
                        where=f"{where}.function") from None
    training = trains_at_import(tree)
    if training is not None:
        raise GrpoError(f"{path} runs training when it is imported (line {training[0]}: `{training[1]}`), and grpo "
                        f"imports it to call {func}", where=f"{where}.function",
                        fix=f"Move {func} into a module of its own (or put the file's training under "
                            "`if __name__ == \"__main__\":`); `grpo import trl SCRIPT.py --extract-rewards` copies it.")
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if func in defs:
        return str(path), _ast_signature(defs[func])
    source = reexported(tree, func, path)
    if source is not None:  # a package face re-exporting it (e.g. trl.rewards, lazily): read where it is defined
        found_path, name = source
        inner = ast.parse(read_text(found_path, what="reward file", where=f"{where}.function"))
        defs_there = {n.name: n for n in inner.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        return str(path), _ast_signature(defs_there[name]) if name in defs_there else None
    assigned = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    imported = {(a.asname or a.name) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    if func in assigned or func in imported:
        return str(path), None
    guess = did_you_mean(func, list(defs))
    raise GrpoError(f"{path} has no function {func!r}", where=f"{where}.function",
                    fix=f"Did you mean `{guess}`?" if guess else
                    f"Functions defined there: {', '.join(sorted(defs)) or 'none'}.")


def _check_signature(entry: RewardEntry, sig: _Signature, where: str) -> list[tuple[str, ...]]:
    """Check TRL's calling convention and the bound params; return the columns it needs."""
    name = entry.function or entry.name
    if sig.positional_only:
        raise GrpoError(f"{name} has positional-only parameters {sig.positional_only}; TRL passes keywords",
                        where=f"{where}.function", fix="Remove the `/` from the signature.")
    if not sig.var_kwargs:
        raise GrpoError(f"{name} does not accept **kwargs, but TRL passes every dataset column and "
                        "trainer_state to each reward", where=f"{where}.function",
                        fix="Add `**kwargs` to its signature.")
    for key in entry.params:
        if key not in sig.params:
            raise GrpoError(f"params key {key!r} is not a parameter of {name}", where=f"{where}.params.{key}",
                            fix=f"Its parameters are: {', '.join(sig.params)}.")
    return [(p,) for p, has_default in sig.params.items()
            if not has_default and p not in TRL_KWARGS and p not in entry.params]


def inspect_reward(entry: RewardEntry, base_dir: Path, index: int = 0) -> RewardInfo:
    """Statically resolve one reward entry; raise GrpoError naming `rewards[index]` when it cannot be."""
    where = f"rewards[{index}]"
    if entry.kind == "builtin":
        assert entry.name is not None
        names = builtin_names()
        if entry.name not in names:
            guess = did_you_mean(entry.name, names)
            raise GrpoError(f"{entry.name!r} is not a built-in reward", where=f"{where}.name",
                            fix=(f"Did you mean `{guess}`? " if guess else "")
                            + f"Built-ins: {', '.join(names)}; or give `function:` for your own code.")
        func = get_builtin(entry.name)
        sig = inspect.signature(func)
        accepted = set(sig.parameters)
        for key in entry.params:
            if key not in accepted or key in TRL_KWARGS:
                tunable = [p for p in accepted if p not in TRL_KWARGS and p != "kwargs"
                           and p not in required_columns(entry.name)]
                guess = did_you_mean(key, tunable)
                raise GrpoError(f"{key!r} is not a parameter of the built-in reward {entry.name!r}",
                                where=f"{where}.params.{key}",
                                fix=(f"Did you mean `{guess}`? " if guess else "")
                                + f"Its parameters: {', '.join(sorted(tunable)) or 'none'}.")
        _check_builtin_values(entry, func, where)
        if entry.name == "code":
            _check_code_backend(entry, where)
        return RewardInfo(entry.label, "builtin", entry.name, list(_builtin_columns(entry)),
                          inspect.iscoroutinefunction(func))
    if entry.kind == "model":
        assert entry.model is not None
        local = local_dir(entry.model, base_dir)
        if local is not None and not (local / "config.json").exists():
            raise GrpoError(f"reward model directory {local} has no config.json", where=f"{where}.model",
                            fix="Point to a directory saved with save_pretrained, or to a hub id.")
        return RewardInfo(entry.label, "model", str(local or entry.model),
                          note="" if local else "hub id, resolved when training starts")
    target, static = _static_function(entry, base_dir, where)
    if static is None:
        return RewardInfo(entry.label, "function", target, note="signature checked when loaded")
    return RewardInfo(entry.label, "function", target, _check_signature(entry, static, where), static.is_async)


def _check_builtin_values(entry: RewardEntry, func: Any, where: str) -> None:
    """Each bound param has the type (or one of the values) its built-in declares, so a typo fails validate."""
    import typing

    from pydantic import TypeAdapter, ValidationError

    hints = typing.get_type_hints(func)
    for key, value in entry.params.items():
        expected = hints.get(key, Any)
        if expected is Any:
            continue
        try:
            TypeAdapter(expected).validate_python(value, strict=True)
        except ValidationError:
            allowed = typing.get_args(expected) if typing.get_origin(expected) is typing.Literal else ()
            name = getattr(expected, "__name__", str(expected))
            want = f"one of {', '.join(map(str, allowed))}" if allowed else f"a value of type {name}"
            raise GrpoError(f"{value!r} is not a valid {key} for the built-in reward {entry.name!r}: it takes {want}",
                            where=f"{where}.params.{key}",
                            fix="See docs/rewards.md for what each value means.") from None


def _check_code_backend(entry: RewardEntry, where: str) -> None:
    """A hosted code sandbox (E2B, Morph) without its API key or snapshot fails on the first reward call: say so now."""
    from grpo_cli.rewards.builtins.code_cloud import CLOUD, config_problem

    backend = str(entry.params.get("backend", "local"))
    url = entry.params.get("backend_url")
    if isinstance(url, str) and not _is_http_url(url):
        raise GrpoError(f"backend_url {url!r} is not an http(s) address", where=f"{where}.params.backend_url",
                        fix="Give the server's base address, e.g. `backend_url: http://localhost:2000` (Piston) or "
                            "`http://sandbox.internal:8080` (SandboxFusion).")
    wait = entry.params.get("backend_wait")
    if isinstance(wait, int | float) and wait < 0:
        raise GrpoError(f"backend_wait {wait!r} is negative", where=f"{where}.params.backend_wait",
                        fix="Give the seconds a server may take beyond the test's timeout to answer (default 30).")
    problem = config_problem(backend, entry.params.get("backend_image"))
    if problem:
        raise GrpoError(problem, where=f"{where}.params.backend",
                        fix=f"Export {CLOUD[backend][0]} before `grpo validate` and `grpo train` (keys stay out of the "
                            "recipe), give what is missing, or use `backend: local`.")


def _is_http_url(url: str) -> bool:
    from urllib.parse import urlparse

    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.hostname) and not any(c.isspace() for c in url)


def _builtin_columns(entry: RewardEntry) -> list[tuple[str, ...]]:
    cols = required_columns(entry.name)
    return [cols] if cols else []


# ---------------------------------------------------------------------------- loading


def is_async_reward(func: Any) -> bool:
    """Whether calling `func` gives a coroutine (functions, partials and callable objects), as TRL decides."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


class BoundReward:
    """A reward with its recipe params bound and its recipe label as `__name__` (TRL's metric name).

    Params win over a dataset column of the same name, so a recipe can pin a value the data also holds.
    Each call is limited to the entry's `timeout`. With `where` set (training), a crash, a timeout or a
    result TRL would choke on stops the run with a paragraph naming the recipe entry instead of a traceback.
    """

    def __init__(self, func: Any, params: dict[str, Any], label: str, timeout: float | None = None) -> None:
        self.func = func
        self.params = dict(params)
        self.__name__ = label
        self.__doc__ = getattr(func, "__doc__", None)
        self.timeout = timeout
        self.where = ""
        self.entry_where = ""  # `rewards[i]`, set by build_reward_funcs

    def __call__(self, **kwargs: Any) -> list[float | None]:
        from grpo_cli.rewards.calling import run_with_timeout  # asyncio: not for `grpo validate`

        try:
            result = run_with_timeout(lambda: self.func(**{**kwargs, **self.params}), self.timeout, self.__name__)
        except Exception as exc:
            raise self._explain(exc, kwargs) from exc
        return self._checked(result, kwargs)

    def _checked(self, result: Any, kwargs: dict[str, Any]) -> Any:
        from grpo_cli.rewards.calling import explain_in_training, training_problem

        problem = training_problem(result, len(kwargs.get("completions") or [])) if self.where else ""
        if problem:
            raise explain_in_training(self.__name__, self.where, problem, kwargs)
        return result

    def _explain(self, exc: Exception, kwargs: dict[str, Any]) -> Exception:
        from grpo_cli.rewards.calling import explain_in_training

        if isinstance(exc, GrpoError) and not isinstance(exc, RewardTimeoutError):
            from grpo_cli.rewards.calling import locate

            return locate(exc, self.where or self.entry_where)
        if not self.where:
            return exc
        if isinstance(exc, RewardTimeoutError):
            error = explain_in_training(self.__name__, self.where, f"did not return within its timeout of "
                                        f"{exc.seconds:g} s", kwargs, RewardTimeoutError)
            assert isinstance(error, RewardTimeoutError)
            error.label, error.seconds = exc.label, exc.seconds
            return error
        return explain_in_training(self.__name__, self.where, f"raised {type(exc).__name__}: {exc}", kwargs)

    def __repr__(self) -> str:
        return f"<reward {self.__name__}>"


class AsyncBoundReward(BoundReward):
    """The async twin of BoundReward, so TRL runs it on its event loop."""

    async def __call__(self, **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        from grpo_cli.rewards.calling import await_with_timeout

        try:
            result = await await_with_timeout(self.func(**{**kwargs, **self.params}), self.timeout, self.__name__)
        except Exception as exc:
            raise self._explain(exc, kwargs) from exc
        return self._checked(result, kwargs)


def _runtime_signature(func: Any) -> _Signature | None:
    """The signature of an imported callable, for rewards the static check could not read."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    params: dict[str, bool] = {}
    positional_only: list[str] = []
    var_kwargs = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kwargs = True
        elif p.kind is not p.VAR_POSITIONAL:
            params[p.name] = p.default is not p.empty
            if p.kind is p.POSITIONAL_ONLY:
                positional_only.append(p.name)
    return _Signature(params, var_kwargs, positional_only, is_async_reward(func))


def _import_function(entry: RewardEntry, base_dir: Path, index: int | None = None) -> Any:
    assert entry.function is not None
    where = f"rewards[{index}].function" if index is not None else f"rewards ({entry.label}).function"
    func = import_reference(entry.function, base_dir, where, kind="callable")
    sig = _runtime_signature(func)
    if sig is not None:
        _check_signature(entry, sig, where.rsplit(".", 1)[0])
    return func


def load_reward(entry: RewardEntry, base_dir: Path, index: int | None = None) -> Any:
    """A TRL reward: a BoundReward for code, or the model path/id string for a reward model.

    TRL loads a string with AutoModelForSequenceClassification(num_labels=1) and its tokenizer, and
    logs it under the last part of the path, which is also the entry's label.
    """
    if entry.kind == "model":
        assert entry.model is not None
        local = local_dir(entry.model, base_dir)
        return str(local) if local is not None else entry.model
    func = get_builtin(entry.name or "") if entry.kind == "builtin" else _import_function(entry, base_dir, index)
    wrapper = AsyncBoundReward if is_async_reward(func) else BoundReward
    params = dict(entry.params)
    if pools_itself(entry) and entry.parallel != "auto" and entry.parallel > 0:
        params.setdefault("parallel", entry.parallel)  # `auto` and 0: the sandboxes get the free cores
    return wrapper(func, params, entry.label, entry.timeout)


def pools_itself(entry: RewardEntry) -> bool:
    """Built-ins that run their own bounded pool (`code`: warm sandboxes) take `parallel:` as a param."""
    return entry.kind == "builtin" and "parallel" in inspect.signature(get_builtin(entry.name or "")).parameters
