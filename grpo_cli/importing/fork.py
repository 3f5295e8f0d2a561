"""An open-r1 fork's own code, read where the recipe is imported from: the fork's checkout. Its README launches
`accelerate launch src/open_r1/grpo.py --config recipes/...`, so the reward names in the recipe (or, when it names
none, the `reward_funcs` default of its GRPOScriptArguments) are keys of the fork's registry
(REWARD_FUNCS_REGISTRY, in grpo.py or rewards.py's get_reward_funcs), which may map them to the fork's own
functions or to reward model ids. Read with `ast`, never run; `hf.py` carries each entry exactly or refuses it."""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from grpo_cli.importing.script_ast import Script, call_name, keyword

TRL_PASSES = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}
"""Keyword arguments TRL's GRPOTrainer gives every reward function (the rest are dataset columns)."""
REGISTRY = "REWARD_FUNCS_REGISTRY"
STOCK_VERSIONS: dict[str, frozenset[str]] = {
    "accuracy_reward": frozenset({"0c43d44c26209916", "0e814ad66a704460", "24ac57df6caee10c", "7491bfe327e6ca75",
        "869afff4367d6f32", "c0438323c261f1f2", "d480e23703c2a473"}),
    "code_reward": frozenset({"07131418ecba1a1c", "0c1ef8c5ae10f24d", "19c9245cc24296a8", "28a3a22c6a945702",
        "855c8fa320ceab73", "e0bcdd8150072abd", "eb834fd57d36eb73"}),
    "format_reward": frozenset({"1844be32d6e371d8", "4d3438e5da46321f", "982d20af3f836efc"}),
    "get_code_format_reward": frozenset({"8f38176b4c0008f2", "baf60302de7c9cb4", "f9143ef15aa46b57"}),
    "get_cosine_scaled_reward": frozenset({"e5aec029f5fa737b"}),
    "get_repetition_penalty_reward": frozenset({"380553d06ba9c3f1", "86b9309991d5404c", "ba2f55d2a4967c05",
        "ebe54cf97305bd7d"}),
    "get_soft_overlong_punishment": frozenset({"b0f39a1c861af35e"}),
    "len_reward": frozenset({"1f56538a1752887b", "a4a6dd06d8b8a268"}),
    "reasoning_steps_reward": frozenset({"d81a5cbc932cb091"}),
    "tag_count_reward": frozenset({"f3e5c506ecdf1135"}),
}
"""open-r1's own reward functions, every version of each in huggingface/open-r1's src/open_r1/rewards.py and grpo.py
(history to 1416fa0, April 2026), as `shape_hash`: a fork's function with one of these hashes is open-r1's, so
grpo's built-in of that name is its equivalent; any other body is the fork's own code."""


@dataclass
class Fork:
    """What the fork's code says about its rewards, its trainer and its model (each with file and line)."""

    package: Path
    registry: dict[str, ast.AST] = field(default_factory=dict)
    registry_in: Script | None = None
    default: list[str] = field(default_factory=list)
    default_at: str = ""
    trainer: tuple[str, str, Path | None] | None = None
    """(class, module, its file) when grpo.py trains with a class that is not TRL's GRPOTrainer."""
    model: tuple[str, int] | None = None
    """(expression, line) when grpo.py gives its trainer a model that does not come from model_name_or_path."""
    scripts: dict[str, Script | None] = field(default_factory=dict)
    """Its files by name (grpo.py, rewards.py, configs.py), parsed once."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Its files that could not be read -> why (a refusal then says so rather than blame the reward's code)."""
    opens_dataset: str = ""
    """Where grpo.py opens `dataset_name` as a local file (`open(script_args.dataset_name)`): then it is no hub id."""
    prompt_column: tuple[str, str] | None = None
    """(column, where) when every user message grpo.py builds from a row reads one constant column
    (`{"role": "user", "content": example["problem"]}`), whatever the YAML's dataset_prompt_column says."""

    def where(self, node: ast.AST, script: Script | None = None) -> str:
        script = script or self.registry_in
        name = script.path.relative_to(self.package.parent.parent) if script is not None else "?"
        return f"{name} line {getattr(node, 'lineno', '?')}"


def _shape(node: object) -> str:
    """The AST as text, without positions, contexts or docstrings: the same on every Python grpo supports."""
    if isinstance(node, ast.AST):
        fields = [f for f in node._fields if f not in ("ctx", "kind", "type_comment", "type_params")]
        return f"{type(node).__name__}({','.join(_shape(getattr(node, f, None)) for f in fields)})"
    if isinstance(node, list):
        return f"[{','.join(_shape(n) for n in node)}]"
    return repr(node)


def shape_hash(func: ast.FunctionDef) -> str:
    """A function's code, docstring and comments aside, as 16 hex digits (STOCK_VERSIONS)."""
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(
            body[0].value.value, str):
        body = body[1:]
    copy = ast.FunctionDef(func.name, func.args, body, func.decorator_list, func.returns)
    return hashlib.sha256(_shape(copy).encode()).hexdigest()[:16]


def stock(func: ast.FunctionDef) -> bool:
    """Whether the fork's function is one of open-r1's own versions of it."""
    return shape_hash(func) in STOCK_VERSIONS.get(func.name, frozenset())


def find_fork(config: Path) -> Fork | None:
    """The checkout above the recipe (recipes/MODEL/grpo/config.yaml -> src/open_r1/grpo.py), read; None without."""
    for parent in list(config.resolve().parents)[:4]:
        package = parent / "src" / "open_r1"
        if (package / "grpo.py").is_file():
            return read_fork(package)
    return None


def _script(path: Path, unreadable: dict[str, str]) -> Script | None:
    if not path.is_file():
        unreadable[path.name] = "is not a regular file"
        return None
    try:
        return Script.parse(path, path.read_text(encoding="utf-8"))
    except SyntaxError as exc:
        unreadable[path.name] = f"is not valid Python (line {exc.lineno})"
    except RecursionError:
        unreadable[path.name] = "nests an expression past Python's recursion limit"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        unreadable[path.name] = f"is not readable as Python source ({type(exc).__name__})"
    return None


def read_fork(package: Path) -> Fork:
    fork = Fork(package)
    fork.scripts = scripts = {name: _script(package / name, fork.unreadable)
                              for name in ("grpo.py", "rewards.py", "configs.py") if (package / name).exists()}
    for script in scripts.values():
        if script is None:
            continue
        for node in ast.walk(script.tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == REGISTRY
                                                    for t in node.targets) and isinstance(node.value, ast.Dict):
                fork.registry = {k.value: v for k, v in zip(node.value.keys, node.value.values, strict=True)
                                 if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                fork.registry_in = script
            elif isinstance(node, ast.ClassDef) and node.name.endswith("ScriptArguments") and not fork.default:
                _default(fork, script, node)
    grpo = scripts.get("grpo.py")
    if grpo is not None:
        _trainer(fork, grpo)
        _data(fork, grpo)
    return fork


def _default(fork: Fork, script: Script, cls: ast.ClassDef) -> None:
    """`reward_funcs: list[str] = field(default_factory=lambda: ["accuracy", "format"])`."""
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and stmt.target.id == "reward_funcs" and isinstance(stmt.value, ast.Call)):
            continue
        factory = keyword(stmt.value, "default_factory")
        value = factory.body if isinstance(factory, ast.Lambda) else keyword(stmt.value, "default")
        if isinstance(value, ast.List) and all(isinstance(e, ast.Constant) for e in value.elts):
            fork.default = [str(e.value) for e in value.elts if isinstance(e, ast.Constant)]
            fork.default_at = fork.where(stmt, script)


def _trainer(fork: Fork, grpo: Script) -> None:
    """The class grpo.py trains with (the call given reward_funcs=) and the model it is given."""
    calls = [n for n in ast.walk(grpo.tree) if isinstance(n, ast.Call) and keyword(n, "reward_funcs") is not None]
    if not calls:
        return
    call, name = calls[0], call_name(calls[0])
    for node in ast.walk(grpo.tree):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            module = "." * node.level + (node.module or "")
            real = next(a.name for a in node.names if (a.asname or a.name) == name)
            if not module.startswith("trl"):
                fork.trainer = (real, module, _module_file(fork.package, module))
    model = keyword(call, "model")
    if isinstance(model, ast.Name):
        model = grpo.lookup(model.id, call) or model
    if isinstance(model, ast.Call) and "model_args" not in ast.unparse(model) and "model_name" not in ast.unparse(
            model):
        fork.model = (" ".join(ast.unparse(model).split()), model.lineno)


def _data(fork: Fork, grpo: Script) -> None:
    """How grpo.py reads its rows where the YAML cannot say: a file it opens itself, the column its prompts read."""
    found: dict[str, list[int]] = {}
    undecided = False
    for node in ast.walk(grpo.tree):
        if isinstance(node, ast.Call) and _opens_dataset_name(node) and not fork.opens_dataset:
            fork.opens_dataset = fork.where(node, grpo)
        if not isinstance(node, ast.Dict):
            continue
        role, content = _entry(node, "role"), _entry(node, "content")
        if not (isinstance(role, ast.Constant) and role.value == "user") or isinstance(content, ast.Constant):
            continue  # not a user message, or a literal one (rlpvr's dummy eval row), not read from a row
        column = content.slice if isinstance(content, ast.Subscript) else None
        if isinstance(column, ast.Constant) and isinstance(column.value, str):
            found.setdefault(column.value, []).append(node.lineno)
        else:
            undecided = True  # `example[prompt_column]`, an f-string...: the YAML's column (or none) decides
    if len(found) == 1 and not undecided:
        (name, lines), = found.items()
        where = f"{grpo.path.relative_to(fork.package.parent.parent)} line{'s' if len(lines) > 1 else ''}"
        fork.prompt_column = (name, f"{where} {', '.join(map(str, sorted(lines)))}")


def _opens_dataset_name(call: ast.Call) -> bool:
    """`open(script_args.dataset_name, ...)`."""
    return (isinstance(call.func, ast.Name) and call.func.id == "open" and bool(call.args)
            and isinstance(call.args[0], ast.Attribute) and call.args[0].attr == "dataset_name")


def _entry(node: ast.Dict, key: str) -> ast.AST | None:
    """The value of `key` in a dict literal."""
    for k, v in zip(node.keys, node.values, strict=True):
        if isinstance(k, ast.Constant) and k.value == key:
            return v
    return None


def _module_file(package: Path, module: str) -> Path | None:
    """`open_r1.grpo_trainer`, `.grpo_trainer` or `knowledge_grpo_trainer` (beside grpo.py, on its sys.path)."""
    parts = module.lstrip(".").split(".")
    for base in (package.parent, package):
        path = base.joinpath(*parts).with_suffix(".py")
        if path.is_file():
            return path
    return None


def function_def(fork: Fork, name: str) -> tuple[Script, ast.FunctionDef] | None:
    """The def of a registry value that is a plain function name, in rewards.py (or where the registry is)."""
    for file in ("rewards.py", "grpo.py"):
        script = fork.scripts.get(file)
        for node in script.tree.body if script is not None else []:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return script, node  # type: ignore[return-value]
    return None


def columns(func: ast.FunctionDef) -> list[str]:
    """The parameters a reward needs that TRL does not pass itself: dataset columns, for TRL's trainer."""
    args = func.args.posonlyargs + func.args.args
    required = args[:len(args) - len(func.args.defaults)]
    kwonly = [a for a, d in zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True) if d is None]
    return [a.arg for a in required + kwonly if a.arg not in TRL_PASSES]


def trainer_passes(fork: Fork, params: list[str]) -> list[str]:
    """Which of `params` the fork's own trainer builds (named in its source): values TRL's trainer never gives."""
    if fork.trainer is None or fork.trainer[2] is None:
        return []
    try:
        text = fork.trainer[2].read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    tree = _script(fork.trainer[2], {})
    names = {n.id for n in ast.walk(tree.tree) if isinstance(n, ast.Name)} if tree is not None else set()
    return [p for p in params if p in names or f'"{p}"' in text or f"'{p}'" in text]
