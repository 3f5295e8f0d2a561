"""An open-r1 fork's reward names carried exactly (fork.py reads them): a reward model id stays one, open-r1's own
functions become grpo's built-ins as for a stock recipe, the fork's own functions are copied with what they use
into the module beside the recipe; a value only the fork's trainer gives them, or code that cannot be copied
exactly, is refused by name."""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.importing import rewards_module
from grpo_cli.importing.common import ImportResult
from grpo_cli.importing.extract import extract
from grpo_cli.importing.fork import Fork, columns, function_def, stock, trainer_passes
from grpo_cli.importing.script_ast import parse

BUILTIN_OF = {"accuracy_reward": "accuracy", "format_reward": "format", "tag_count_reward": "tag_count",
              "reasoning_steps_reward": "reasoning_steps", "len_reward": "length", "get_cosine_scaled_reward": "cosine",
              "get_repetition_penalty_reward": "repetition_penalty", "code_reward": "code",
              "get_code_format_reward": "code_format", "get_soft_overlong_punishment": "soft_overlong_punishment"}
"""open-r1's registry: the function (or factory) behind each name, which grpo's built-in of that name replaces."""
OWN = "__fork__:"
"""An entry's function before it is copied: OWN + the fork's function name."""


@dataclass
class ForkRewards:
    """How the fork's names were carried: refusals say why (the recipe then names no placeholder reward)."""

    fork: Fork
    refused: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    """The fork's function -> the registry name the recipe used for it."""


def fork_names(fork: Fork, names: list[Any], out: ImportResult) -> list[Any]:
    """The YAML's reward_funcs, or the fork's default when it names none (as the fork's grpo.py would run)."""
    if names or not fork.default:
        return names
    out.notes.append(f"reward_funcs: the config names none, so the fork's grpo.py trains with its default "
                     f"{fork.default} ({fork.default_at})")
    return list(fork.default)


def fork_entry(state: ForkRewards, name: str, out: ImportResult) -> tuple[bool, dict[str, Any] | None]:
    """(stock, entry) for a registry name of the fork: stock when it is open-r1's own function or factory, unchanged
    (the stock mapping applies), else the entry (None when refused)."""
    fork = state.fork
    value = fork.registry[name]
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        out.notes.append(f"reward_funcs {name}: the fork's registry names the reward model {value.value} "
                         f"({fork.where(value)})")
        return False, {"model": value.value}
    called = [n.id for n in ast.walk(value) if isinstance(n, ast.Name)]
    found = next((f for f in (function_def(fork, c) for c in called) if f is not None), None)
    if found is not None and BUILTIN_OF.get(found[1].name) == name and stock(found[1]):
        return True, None  # open-r1's own code, unchanged: grpo's built-in of the name
    if found is not None and isinstance(value, ast.Name):
        state.names[found[1].name] = name
        return False, {"function": OWN + found[1].name}
    why = (f"the fork's registry makes it with `{' '.join(ast.unparse(value).split())[:80]}` ({fork.where(value)})"
           + (f" from its own {found[1].name}, which is not open-r1's" if found is not None else "")
           + (": a value built when the fork's grpo.py runs, which grpo cannot copy exactly" if found is not None
              or not fork.unreadable else ", defined where grpo cannot read: " + "; ".join(
                  f"src/open_r1/{n} {why}" for n, why in fork.unreadable.items())))
    _refuse(state, out, name, why)
    return False, None


def _refuse(state: ForkRewards, out: ImportResult, name: str, why: str) -> None:
    state.refused.append(name)
    out.drop(f"reward_funcs[{name}]", name, why)


def carry_own(state: ForkRewards, entries: list[dict[str, Any]], out: ImportResult, extract_to: Path | None) -> None:
    """Copy the fork's own functions into the module beside the recipe (`extract_to`) and point their entries there;
    one that cannot be copied (or with no recipe file to copy beside) is referenced in the fork's own module."""
    own = [e for e in entries if str(e.get("function", "")).startswith(OWN)]
    wanted = [f for f in dict.fromkeys(str(e["function"]).removeprefix(OWN) for e in own) if _given(state, f, out)]
    found = [f for f in (function_def(state.fork, name) for name in wanted) if f is not None]
    script = found[0][0] if found else None
    copied = extract(script, wanted, extract_to.name) if extract_to is not None and script is not None else None
    done = copied.names if copied is not None else []
    module = rewards_module(extract_to) if extract_to is not None else None
    package = f"{state.fork.package.name}.{script.path.stem}" if script is not None else ""
    for entry in own:
        func = str(entry["function"]).removeprefix(OWN)
        entry["function"] = f"{module.resolve()}:{func}" if module is not None and func in done else f"{package}:{func}"
    entries[:] = [e for e in entries if e not in own or str(e["function"]).rpartition(":")[2] in wanted]
    for func in (f for f in wanted if f not in done):
        why = f"not copied: {copied.failed[func]}" if copied is not None and func in copied.failed else "no -o recipe"
        out.notes.append(f"reward {state.names.get(func, func)}: the fork's {func} ({why}) is referenced as "
                         f"{package}:{func}, the fork's own module, which grpo imports where the fork is installed "
                         "(`pip install -e .` in its checkout, as its README installs it)")
    if copied is not None and module is not None and done and script is not None:
        out.extracted = (module, copied.text)
        out.notes.append(f"rewards {', '.join(done)}: the fork's own functions ({script.path.name}), copied exactly "
                         f"with what they use into {module.name} (extraction is on by default with -o)")
        _not_installed(copied.text, module, out)


def _given(state: ForkRewards, func: str, out: ImportResult) -> bool:
    """Whether TRL's trainer gives `func` what it reads: a value only the fork's own trainer builds is refused."""
    fork = state.fork
    found = function_def(fork, func)
    built = trainer_passes(fork, columns(found[1])) if found is not None else []
    if built and fork.trainer is not None:
        _refuse(state, out, state.names.get(func, func), f"it reads `{'`, `'.join(built)}`, which the fork's own "
                f"trainer {fork.trainer[0]} ({fork.trainer[1]}) builds as it generates, not a dataset column: "
                "TRL's GRPOTrainer, which grpo trains with, never gives it")
        return False
    return True


def _not_installed(text: str, module: Path, out: ImportResult) -> None:
    """Packages the copies import that this machine lacks: validate does not import rewards, training does."""
    body = parse(text, module).body
    tops = {(n.module or "").split(".")[0] for n in body if isinstance(n, ast.ImportFrom) and n.module}
    tops |= {a.name.split(".")[0] for n in body if isinstance(n, ast.Import) for a in n.names}
    missing = sorted(t for t in tops if t and importlib.util.find_spec(t) is None)
    if missing:
        out.notes.append(f"{module.name} imports {', '.join(missing)}, not installed here: install "
                         f"{'it' if len(missing) == 1 else 'them'} where you train (`pip install {' '.join(missing)}`)")


def refuse_unread(state: ForkRewards, out: ImportResult) -> None:
    """What the fork's rewards are cannot be carried: say so, with no placeholder reward to fill in."""
    if state.refused:
        names = ", ".join(state.refused)
        out.refuse(f"rewards: the fork's {names} cannot be carried (each is listed under 'not carried over' with the "
                   "reason), and a recipe that trains without them trains something else: finish the recipe by hand "
                   "with rewards that do the same, or train with the fork's own code")


def fork_lines(fork: Fork, out: ImportResult) -> None:
    """What the fork's grpo.py does that its YAML does not say: its own trainer class, a model it builds itself."""
    if fork.trainer is not None:
        cls, module, _ = fork.trainer
        out.drop("grpo.py trainer", f"{module}.{cls}", "the fork trains with its own trainer class; grpo trains with "
                 "TRL's GRPOTrainer, so what only that class does (and the options only it reads, listed here) "
                 "is not carried over")
    if fork.model is not None:
        expression, line = fork.model
        out.drop("grpo.py model", expression, f"the fork's grpo.py (line {line}) gives its trainer this model, not "
                 "the config's model_name_or_path: the recipe trains model.name_or_path as the config names it, "
                 "and what that code sets up (e.g. LoRA) is not read")
