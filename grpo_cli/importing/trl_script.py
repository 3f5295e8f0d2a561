"""A TRL training script read without running it: the literal keywords of its `GRPOConfig(...)`, and what its
`*GRPOTrainer(...)` is given: the model (`script_model`), rewards (`script_rewards`), data (`script_data`), as a
`trl grpo` config would say. A TrlParser script reads its settings from the YAML it is launched with."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.importing import rewards_module
from grpo_cli.importing.common import NO_REWARD, ImportResult
from grpo_cli.importing.extract import extract
from grpo_cli.importing.script_ast import NO, Script, call_name, keyword, receiver
from grpo_cli.importing.script_data import held_out, read_data
from grpo_cli.importing.script_marimo import app_note
from grpo_cli.importing.script_model import read_model
from grpo_cli.importing.script_rewards import NESTED, Rewards, read_rewards, trains_at_import
from grpo_cli.paths import read_text


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
TRLPARSER = "__trlparser__"
"""cfg key: the script reads its settings with TrlParser from a YAML given at launch (`--config`)."""
UNREAD_REWARDS = "__unread_rewards__"
"""cfg key: [(expression, why)] of reward functions the trainer gets that cannot be referenced."""
SCRIPT_PROMPT = "__prompt__"
"""cfg key: data.prompt read from the script's dataset.map."""
SCRIPT_ANSWER = "__answer__"
"""cfg key: data.answer read from the script's dataset.map."""
SCRIPT_COLUMNS = "__columns__"
"""cfg key: data.columns (`new: old`) read from the script's dataset.map."""
SCRIPT_ROWS = "__rows__"
"""cfg key: (rows, the code) of rows the script builds from constants (`Dataset.from_list([...] * 1000)`)."""


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


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


def _parse(path: Path, config: dict[str, Any] | None) -> Script:
    """The script, parsed; a file that is not Python source (binary, Latin-1, a directory, a syntax error) is one
    paragraph naming the file and line."""
    text = read_text(path, what="TRL script", where=str(path))
    try:
        return Script.parse(path, text, config)
    except SyntaxError as exc:
        raise GrpoError(f"not valid Python at line {exc.lineno}, column {exc.offset}: {exc.msg}", where=str(path),
                        fix="Give the training script as it runs (`python SCRIPT` must accept it), or its "
                            "`trl grpo --config` YAML.") from None
    except ValueError as exc:  # e.g. source with a NUL byte past the binary sniff
        raise GrpoError(f"not Python source: {exc}", where=str(path), fix="Give the training script.") from None


def read_script(path: Path, config: dict[str, Any] | None = None,
                extract_to: Path | None = None) -> tuple[dict[str, Any], ImportResult]:
    """(config keys in `trl grpo` form, a result holding what could not be read statically). `config` is the YAML
    a TrlParser script is launched with: its keys come first, and `script_args.key` in the script reads them.
    With `extract_to` (the recipe), rewards that cannot be referenced in place are copied into a module beside it."""
    script = _parse(path, config)
    cfg: dict[str, Any] = dict(config or {})
    skipped = ImportResult(str(path), "trl")
    for call in script.calls("GRPOConfig"):
        _grpo_config(script, call, cfg, skipped)
    for call in script.calls("from_dict"):
        if call.args and (text := constant_prompt(call.args[0], script.tree)) is not None:
            cfg[CONSTANT_PROMPT] = text
    trainers = script.calls(*_trainer_names(script))
    if trainers:
        _trainer(script, trainers[0], cfg, skipped, extract_to)
    elif (first := script.calls("load_dataset")) and "dataset_name" not in cfg:
        _first_dataset(script, first[0], cfg)
    if script.calls("TrlParser", "parse_args_and_config") and config is None:
        cfg[TRLPARSER] = True
    if (note := script.defaults_note()) is not None:
        skipped.notes.append(note)
    if script.cells:
        _gating_widgets(script)
        skipped.notes += app_note(path.name, script.cells, script.widgets_used)
    _downloads(script, cfg, skipped)
    if any(m.split(".")[0] == "unsloth" for m in script.imports.values()):
        _unsloth_batch(cfg, skipped)
    return cfg, skipped


GATED = {"LoraConfig", "get_peft_model", "GRPOConfig", "from_pretrained", "load_dataset", "BitsAndBytesConfig"}
"""Calls whose reading depends on the branch an `if widget.value:` takes (`if use_peft_checkbox.value:` LoRA)."""


def _gating_widgets(script: Script) -> None:
    """A marimo input that decides whether a read call runs (the LoRA under `if use_peft_checkbox.value:`) is
    listed with the widgets read: the recipe follows the branch its initial value takes."""
    for node in ast.walk(script.tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Attribute) and node.test.attr == "value" and \
                any(isinstance(n, ast.Call) and call_name(n) in GATED for n in ast.walk(node)):
            script.value(node.test)


def _downloads(script: Script, cfg: dict[str, Any], skipped: ImportResult) -> None:
    """A data file the script fetches when it is missing (`repo.download(train_file)`): say from where, since the
    recipe reads the file and nothing fetches it."""
    files = cfg.get("dataset_files")
    wanted = set(files.values()) if isinstance(files, dict) else {files} if isinstance(files, str) else set()
    for call in script.calls("download"):
        name = script.value(call.args[0]) if call.args else NO
        if not isinstance(name, str) or name not in wanted:
            continue
        owner = receiver(call)
        built = script.lookup(owner.id, owner) if isinstance(owner, ast.Name) else None
        origin = script.value(built.args[0]) if isinstance(built, ast.Call) and built.args else NO
        source = f" from {call_name(built)}({origin!r})" if isinstance(origin, str) else ""  # type: ignore[arg-type]
        skipped.notes.append(f"data.files: {script.path.name} downloads {name}{source} when it is missing "
                             f"(`{script.source(call, 50)}`, line {call.lineno}): fetch it beside the recipe before "
                             "training")


def _unsloth_batch(cfg: dict[str, Any], skipped: ImportResult) -> None:
    """Unsloth's GRPOConfig sets per_device_train_batch_size to num_generations when the batch does not divide
    into groups (unsloth/models/rl.py); TRL would raise, so the recipe says what Unsloth trained with."""
    size, generations = cfg.get("per_device_train_batch_size"), cfg.get("num_generations", 8)
    steps = cfg.get("gradient_accumulation_steps", 1)
    if isinstance(size, int) and isinstance(generations, int) and isinstance(steps, int) and generations > 0 \
            and (size * steps) % generations:
        cfg["per_device_train_batch_size"] = generations
        skipped.notes.append(f"per_device_train_batch_size {size} -> {generations}: Unsloth changes it to "
                             "num_generations when the batch does not divide into groups, and trained with that")


def _trainer_names(script: Script) -> list[str]:
    """TRL's GRPOTrainer, its subclasses (`*GRPOTrainer`), and names bound to one (`trainer_cls = MyGRPOTrainer`)."""
    names = {call_name(n) for n in ast.walk(script.tree) if isinstance(n, ast.Call)
             and call_name(n).endswith("GRPOTrainer")}
    aliases = {name for (_, name), found in script.assigns.items()
               if any(isinstance(v, ast.Name) and v.id.endswith("GRPOTrainer") for _, v, _ in found)}
    return sorted(names | aliases)


def _trainer_class(script: Script, node: ast.Call) -> str:
    name = call_name(node)
    if not name.endswith("GRPOTrainer") and isinstance(node.func, ast.Name):
        found = script.lookup(name, node)
        if isinstance(found, ast.Name):
            return found.id
    return name


def _grpo_config(script: Script, call: ast.Call, cfg: dict[str, Any], skipped: ImportResult) -> None:
    for kw in call.keywords:
        value = script.value(kw.value)
        if kw.arg is None:
            skipped.drop("GRPOConfig(**...)", ast.unparse(kw.value), f"keywords built at run time (line {call.lineno})")
        elif value is not NO:
            cfg[kw.arg] = value
        else:
            skipped.drop(f"GRPOConfig({kw.arg}=...)", script.source(kw.value, 70), f"not a literal: computed when "
                         f"the script runs (line {kw.value.lineno})")


def _first_dataset(script: Script, call: ast.Call, cfg: dict[str, Any]) -> None:
    name = script.text(call.args[0]) if call.args else None
    if name is not None:
        cfg["dataset_name"] = name
        split = script.text(keyword(call, "split"))
        if split:
            cfg["dataset_train_split"] = split
        if len(call.args) > 1 and script.text(call.args[1]):
            cfg["dataset_config"] = script.text(call.args[1])


def _trainer(script: Script, node: ast.Call, cfg: dict[str, Any], skipped: ImportResult,
             extract_to: Path | None) -> None:
    name = _trainer_class(script, node)
    if name != "GRPOTrainer":
        where = "defined in the script" if name in script.defs else f"from {script.imports.get(name, 'elsewhere')}"
        skipped.drop(name, f"line {node.lineno}", f"a GRPOTrainer subclass ({where}): its overrides are its own "
                     "code, and grpo trains with TRL's GRPOTrainer; its arguments are carried over")
    read_model(script, node, cfg, skipped)
    _data(script, node, cfg, skipped)
    rewards = read_rewards(script, node)
    if extract_to is not None:
        extract_rewards(script, rewards, extract_to, skipped)
    if keyword(node, "reward_funcs") is not None:
        models = [n.removeprefix("model=") for n in rewards.names if n.startswith("model=")]
        cfg["reward_funcs"] = [n for n in rewards.names if not n.startswith("model=")]
        if models:
            cfg["reward_model_name_or_path"] = models[0]
        for extra in models[1:]:
            skipped.drop("GRPOTrainer(reward_funcs=...)", extra, "a second reward model: add it as a `model:` "
                         "reward by hand")
        cfg[UNREAD_REWARDS] = rewards.unread
    for kw in node.keywords:
        if kw.arg == "environment_factory" and _name(kw.value) in set(script.defs) | set(script.imports):
            env = _name(kw.value)
            cfg[ENVIRONMENT] = f"{script.path.resolve()}:{env}" if env in script.defs else \
                f"{script.imports[env]}:{env}"
        elif kw.arg in ("environment_factory", "rollout_func"):
            skipped.drop(f"GRPOTrainer({kw.arg}=...)", ast.unparse(kw.value), "an environment or rollout defined "
                         "in code: name its class in `environment:` (tools as methods)")
        elif kw.arg in ("callbacks", "tools"):
            skipped.drop(f"GRPOTrainer({kw.arg}=...)", ast.unparse(kw.value), "an object built in the script: "
                         "write it as callbacks / tools")
        elif kw.arg == "eval_dataset" and (script.value(kw.value) is None or held_out(script, kw.value)):
            continue  # none, or the rows train_test_split held out: data.eval_holdout
        elif kw.arg == "eval_dataset":
            skipped.drop("GRPOTrainer(eval_dataset=...)", script.source(kw.value, 60), "evaluation rows built in "
                         f"the script (line {kw.value.lineno}): give data.eval_split or data.eval_holdout")
        elif kw.arg not in TRAINER_READ:
            skipped.drop(f"GRPOTrainer({kw.arg}=...)", script.source(kw.value, 60), f"a trainer argument grpo does "
                         f"not carry (line {kw.value.lineno})")


TRAINER_READ = {"model", "reward_funcs", "train_dataset", "args", "processing_class", "tokenizer", "peft_config",
                "environment_factory", "rollout_func", None}
"""GRPOTrainer arguments read above (a tokenizer follows the model; `args` is the GRPOConfig)."""


def _data(script: Script, trainer: ast.Call, cfg: dict[str, Any], skipped: ImportResult) -> None:
    facts = read_data(script, trainer)
    for key, value in facts.cfg.items():
        if key == "dataset_name" or key not in cfg:
            cfg[key] = value
    if facts.prompt is not None:
        cfg[SCRIPT_PROMPT] = facts.prompt
    if facts.answer is not None:
        cfg[SCRIPT_ANSWER] = facts.answer
    if facts.columns:
        cfg[SCRIPT_COLUMNS] = facts.columns
    if facts.rows is not None:
        cfg[SCRIPT_ROWS] = (facts.rows, facts.rows_code)
    skipped.notes += facts.notes
    for key, value, why in facts.lost:
        if CONSTANT_PROMPT in cfg and "train_dataset" in key:
            continue  # one constant prompt, copied: environment-only rows (apply_environment)
        skipped.drop(key, value, why)


def extract_rewards(script: Script, rewards: Rewards, recipe: Path, skipped: ImportResult) -> None:
    """Copy the rewards grpo cannot import where they are (defs inside a function or a marimo cell; the script's
    own defs when its top-level code trains) into the module beside `recipe`, and point the entries there."""
    module = rewards_module(recipe)
    own = f"{script.path.resolve()}:"
    trains = trains_at_import(script.path) is not None
    wanted = {i: (ref.removeprefix(own) if ref else expression) for i, (ref, expression, why) in
              enumerate(rewards.entries) if (ref is None and why.startswith(NESTED))
              or (trains and ref is not None and ref.startswith(own))}
    if not wanted:
        return
    found = extract(script, list(dict.fromkeys(wanted.values())), recipe.name)
    for i, name in wanted.items():
        _, expression, _ = rewards.entries[i]
        if name in found.names:
            rewards.entries[i] = (f"{module.resolve()}:{name}", expression, "")
        elif name in found.failed:
            rewards.entries[i] = (None, expression, f"not extracted: {found.failed[name]}")
    by_decorator: dict[str, list[str]] = {}
    for func, decorator, line in found.decorators:
        by_decorator.setdefault(decorator.split("(")[0], []).append(f"{func} (line {line})")
    for decorator, funcs in by_decorator.items():
        skipped.drop(f"@{decorator}(...)", ", ".join(funcs), f"a decorator the copies leave off: the wrapper it puts "
                     f"around each (here {decorator}) is code of {script.path.name} that grpo does not run: the "
                     "copies are the undecorated functions")
    if found.names:
        skipped.extracted = (module, found.text)  # written with the recipe, after every check
        for name, (line, statement) in found.bound.items():
            skipped.notes.append(f"`{name}` (line {line}: `{statement[:70]}`) is bound in {module.name} to the "
                                 f"tokenizer grpo trains with: the recipe's model, loaded when a reward first uses it")
        if found.runs:
            made = "; ".join(f"`{statement[:60]}` (line {line})" for _, line, statement in found.runs)
            skipped.notes.append(f"{module.name} makes, when imported, the calls of {script.path.name}'s own code "
                                 f"that its cells made: {made}")
        skipped.notes.append(f"rewards {', '.join(found.names)} copied exactly, with what they use, into "
                             f"{module.name} (extraction is on by default with -o; --no-extract-rewards turns it "
                             f"off), so grpo imports them without running {script.path.name}")


def apply_environment(out: ImportResult, environment: str | None, prompt: str | None) -> None:
    """A script's `environment_factory` class -> `environment:`; rows that are one constant prompt -> the
    environment-only rows (`data.from_environment`), since the environment's reset() serves the task."""
    if environment is None:
        if prompt is not None:
            out.notes.append("the script's rows are one constant prompt: write it as `data.prompt.template` over a "
                             "one-row data file")
        return
    out.put("environment", environment)
    if NO_REWARD in out.problems:  # TRL needs no reward function when the environment defines get_reward
        out.problems.remove(NO_REWARD)
        out.needs.pop("rewards", None)
        out.notes.append("no reward functions: the environment's get_reward scores (validate checks it has one)")
    if out.get("data.dataset") is not None or prompt is None:
        return
    data: dict[str, Any] = {"from_environment": True, "prompt": {"template": prompt.replace("{", "{{")
                                                                 .replace("}", "}}"), "chat": True}}
    out.recipe["data"] = data
    out.notes.append("the script's rows are one constant prompt, which the environment's reset() completes: "
                     "environment-only rows (`data.from_environment`); give `training.max_steps`, since the "
                     "script counted epochs over its copies of that prompt")
