"""A TRL training script read without running it: the literal keywords of its `GRPOConfig(...)`, the model,
rewards and dataset of its `GRPOTrainer(...)` / `load_dataset(...)` calls, as a `trl grpo` config would say."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from grpo_cli.importing.common import ImportResult


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


ENVIRONMENT = "__environment_factory__"
"""cfg key: the `environment:` class a script's GRPOTrainer(environment_factory=Name) names."""
CONSTANT_PROMPT = "__constant_prompt__"
"""cfg key: the one user message of every row of a `Dataset.from_dict({"prompt": [[{...}] for _ in ...]})`."""


def _string_constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}


def constant_prompt(node: ast.AST, tree: ast.Module) -> str | None:
    """The text of `{"prompt": [[{"role": "user", "content": TEXT}] for _ in range(N)]}` (TEXT a literal or a
    module-level string constant): rows that differ in nothing, as environment-only rows are; else None."""
    key = node.keys[0] if isinstance(node, ast.Dict) and len(node.keys) == 1 else None
    if not (isinstance(node, ast.Dict) and key is not None and _literal(key) == (True, "prompt")):
        return None
    rows = node.values[0]
    if not (isinstance(rows, ast.ListComp) and isinstance(rows.elt, ast.List) and len(rows.elt.elts) == 1
            and isinstance(rows.elt.elts[0], ast.Dict)):
        return None
    message = dict(zip((_literal(k)[1] if k else None for k in rows.elt.elts[0].keys), rows.elt.elts[0].values,
                       strict=True))
    if set(message) != {"role", "content"} or _literal(message["role"]) != (True, "user"):
        return None
    ok, text = _literal(message["content"])
    if not ok and isinstance(message["content"], ast.Name):
        text = _string_constants(tree).get(message["content"].id)
    return text if isinstance(text, str) else None


def _imported_from(tree: ast.Module) -> dict[str, str]:
    """local name -> the module it was imported from."""
    return {(a.asname or a.name): node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for a in node.names}


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


def _reward_names(node: ast.AST, imports: dict[str, str], defs: set[str], script: str) -> tuple[list[str], list[str]]:
    """(reward_funcs entries a `trl grpo` config would hold, expressions that could not be read)."""
    items = node.elts if isinstance(node, ast.List | ast.Tuple) else [node]
    names, unread = [], []
    for item in items:
        name = _name(item)
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            names.append(f"model={item.value}")  # a reward model id
        elif name and imports.get(name, "").startswith("trl.rewards"):
            names.append(name)
        elif name in defs:
            names.append(f"{script}:{name}")
        elif name and name in imports:
            names.append(f"{imports[name]}.{name}")
        else:
            unread.append(ast.unparse(item))
    return names, unread


def _parse(path: Path) -> ast.Module:
    """The script's syntax tree; a file that is not Python source (binary, Latin-1, a directory, a syntax error)
    is one paragraph naming the file and line."""
    from grpo_cli.errors import GrpoError
    from grpo_cli.paths import read_text

    text = read_text(path, what="TRL script", where=str(path))
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise GrpoError(f"not valid Python at line {exc.lineno}, column {exc.offset}: {exc.msg}", where=str(path),
                        fix="Give the training script as it runs (`python SCRIPT` must accept it), or its "
                            "`trl grpo --config` YAML.") from None
    except ValueError as exc:  # e.g. source with a NUL byte past the binary sniff
        raise GrpoError(f"not Python source: {exc}", where=str(path), fix="Give the training script.") from None


def read_script(path: Path) -> tuple[dict[str, Any], ImportResult]:
    """(config keys in `trl grpo` form, a result holding what could not be read statically)."""
    tree = _parse(path)
    imports = _imported_from(tree)
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    cfg: dict[str, Any] = {}
    skipped = ImportResult(str(path), "trl")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = _name(node.func)
        if func == "GRPOConfig":
            for kw in node.keywords:
                ok, value = _literal(kw.value)
                if kw.arg is None:
                    skipped.drop("GRPOConfig(**...)", ast.unparse(kw.value), "keywords built at run time")
                elif ok:
                    cfg[kw.arg] = value
                else:
                    skipped.drop(f"GRPOConfig({kw.arg}=...)", ast.unparse(kw.value), "not a literal: computed when "
                                 "the script runs")
        elif func == "GRPOTrainer":
            _trainer(node, cfg, imports, defs, str(path.resolve()), skipped)
        elif func == "from_dict" and node.args and (text := constant_prompt(node.args[0], tree)) is not None:
            cfg[CONSTANT_PROMPT] = text
        elif func == "load_dataset" and node.args and "dataset_name" not in cfg:
            ok, value = _literal(node.args[0])
            if ok and isinstance(value, str):
                cfg["dataset_name"] = value
                for kw in node.keywords:
                    ok, split = _literal(kw.value)
                    if kw.arg == "split" and ok and isinstance(split, str):
                        cfg["dataset_train_split"] = split
                if len(node.args) > 1 and _literal(node.args[1])[0]:
                    cfg["dataset_config"] = _literal(node.args[1])[1]
    return cfg, skipped


def _trainer(node: ast.Call, cfg: dict[str, Any], imports: dict[str, str], defs: set[str], script: str,
             skipped: ImportResult) -> None:
    for kw in node.keywords:
        if kw.arg == "model":
            ok, value = _literal(kw.value)
            if ok and isinstance(value, str):
                cfg["model_name_or_path"] = value
            else:
                skipped.drop("GRPOTrainer(model=...)", ast.unparse(kw.value), "a model object built in the script")
        elif kw.arg == "reward_funcs":
            names, unread = _reward_names(kw.value, imports, defs, script)
            models = [n.removeprefix("model=") for n in names if n.startswith("model=")]
            cfg["reward_funcs"] = [n for n in names if not n.startswith("model=")]
            if models:
                cfg["reward_model_name_or_path"] = models[0]
            for extra in models[1:]:
                skipped.drop("GRPOTrainer(reward_funcs=...)", extra, "a second reward model: add it as a `model:` "
                             "reward by hand")
            for text in unread:
                skipped.drop("GRPOTrainer(reward_funcs=...)", text, "not a name the script imports or defines")
        elif kw.arg == "environment_factory" and _name(kw.value) in defs | set(imports):
            name = _name(kw.value)
            cfg[ENVIRONMENT] = f"{script}:{name}" if name in defs else f"{imports[name]}:{name}"
        elif kw.arg in ("environment_factory", "rollout_func"):
            skipped.drop(f"GRPOTrainer({kw.arg}=...)", ast.unparse(kw.value), "an environment or rollout defined "
                         "in code: name its class in `environment:` (tools as methods)")
        elif kw.arg in ("peft_config", "callbacks", "tools"):
            skipped.drop(f"GRPOTrainer({kw.arg}=...)", ast.unparse(kw.value), "an object built in the script: "
                         "write it as model.lora / callbacks / tools")


PLACEHOLDER_NOTE = "the config names no reward: rewards has a placeholder `accuracy` entry"


def apply_environment(out: ImportResult, environment: str | None, prompt: str | None) -> None:
    """A script's `environment_factory` class -> `environment:`; rows that are one constant prompt -> the
    environment-only rows (`data.from_environment`), since the environment's reset() serves the task."""
    if environment is None:
        if prompt is not None:
            out.notes.append("the script's rows are one constant prompt: write it as `data.prompt.template` over a "
                             "one-row data file")
        return
    out.put("environment", environment)
    if PLACEHOLDER_NOTE in out.notes:  # TRL needs no reward function when the environment defines get_reward
        out.notes.remove(PLACEHOLDER_NOTE)
        out.recipe.pop("rewards", None)
        out.notes.append("no reward functions: the environment's get_reward scores (validate checks it has one)")
    if out.get("data.dataset") is not None or prompt is None:
        return
    data: dict[str, Any] = {"from_environment": True, "prompt": {"template": prompt.replace("{", "{{")
                                                                 .replace("}", "}}"), "chat": True}}
    out.recipe["data"] = data
    out.notes.append("the script's rows are one constant prompt, which the environment's reset() completes: "
                     "environment-only rows (`data.from_environment`); give `training.max_steps`, since the "
                     "script counted epochs over its copies of that prompt")
