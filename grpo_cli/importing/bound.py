"""Script-time globals a copied reward reads that grpo can give it exactly: the tokenizer the script loads once
from its model (`model, tokenizer = FastLanguageModel.from_pretrained(...)`, `AutoTokenizer.from_pretrained(...)`).

The copy gets a stand-in that loads, on first use, the tokenizer grpo trains with: the model of the recipe beside
the module, with the recipe's chat template and pad token (`models.loading.load_tokenizer`), which is what the
script hands its trainer as `processing_class`. The binding is refused, with the line that decides it, when the
script changes the tokenizer in a way the reward reads (a chat template the reward renders, tokens it adds), when
the name is bound to something else too, or when the tokenizer is a vision model's processor."""

from __future__ import annotations

import ast
import re

from grpo_cli.importing.script_ast import Script

TEXT_LOADERS = {"AutoTokenizer", "FastLanguageModel", "FastModel"}
VISION_LOADERS = {"AutoProcessor", "FastVisionModel"}
PAIR_LOADERS = {"FastLanguageModel", "FastModel", "FastVisionModel"}
"""Loaders that return (model, tokenizer): only the second name is a tokenizer."""
VOCABULARY = {"add_tokens", "add_special_tokens", "resize_token_embeddings"}
DEPENDS = {"apply_chat_template": "chat_template"}
"""A method reads what another attribute holds: the chat template a rendering uses."""

WRAPPER = "_RecipeTokenizer"
WRAPPER_CODE = f'''class {WRAPPER}:
    """The tokenizer grpo trains with (the recipe's model, chat template and pad token), loaded on first use:
    what the script's `tokenizer` was. `recipe` is the recipe file beside this module, read as written there (a
    command-line override of its model does not reach this copy: edit the recipe instead)."""

    def __init__(self, recipe):
        self._recipe = recipe
        self._loaded = None

    def _tokenizer(self):
        if self._loaded is None:
            from pathlib import Path

            from grpo_cli.models.loading import load_tokenizer
            from grpo_cli.recipe import load_recipe

            self._loaded = load_tokenizer(load_recipe(Path(__file__).with_name(self._recipe)))
        return self._loaded

    def __getattr__(self, name):
        return getattr(self._tokenizer(), name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer()(*args, **kwargs)

    def __len__(self):
        return len(self._tokenizer())
'''


def _loader(value: ast.AST) -> str | None:
    """`X.from_pretrained(...)` -> X."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "from_pretrained":
        receiver = value.func.value
        return receiver.id if isinstance(receiver, ast.Name) else None
    return None


def _position(stmt: ast.stmt, name: str) -> int | None:
    """Where `name` stands in `a, b = ...` (None for a plain `name = ...`)."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    if len(targets) == 1 and isinstance(targets[0], ast.Tuple | ast.List):
        found = [i for i, t in enumerate(targets[0].elts) if isinstance(t, ast.Name) and t.id == name]
        return found[0] if found else -1
    return None


def tokenizer_binding(script: Script, name: str) -> tuple[int, str] | str | None:
    """(line, `model, tokenizer = ...` as written) when `name` is the script's tokenizer, loaded once from its model;
    a reason when it looks like one but cannot be bound exactly; None when it is not a tokenizer."""
    bindings = [(line, value, stmt) for (_, bound), found in script.assigns.items() if bound == name
                for line, value, stmt in found]
    loads = [(line, _loader(value), stmt) for line, value, stmt in bindings if _loader(value)]
    if not loads or not all(loader in TEXT_LOADERS | VISION_LOADERS for _, loader, _ in loads):
        return None
    line, loader, stmt = loads[0]
    if _position(stmt, name) != (1 if loader in PAIR_LOADERS else None):
        return (f"it uses `{name}`, the model the script loads (line {line}: {loader}.from_pretrained), which grpo "
                "does not bind")  # `model, tokenizer = FastLanguageModel.from_pretrained(...)`: only the second
    if loader in VISION_LOADERS:
        return (f"it uses `{name}`, a vision model's processor (line {line}: {loader}.from_pretrained), which grpo "
                "does not bind")
    others = [(n, v) for n, v, _ in bindings if not _loader(v)]
    if len(loads) > 1 or others:
        n, v = others[0] if others else (loads[1][0], None)
        what = f"`{' '.join(ast.unparse(v).split())[:50]}`" if v is not None else "a second from_pretrained"
        return f"it uses `{name}`, which the script binds again (line {n}: {what})"
    return line, " ".join(ast.unparse(stmt).split())


def changes(script: Script, name: str) -> dict[str, int]:
    """What the script changes on `name` after loading it: attribute -> line (`tokenizer.chat_template = ...`);
    `vocabulary` for tokens it adds."""
    out: dict[str, int] = {}
    for node in ast.walk(script.tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == name:
                out.setdefault(target.attr, target.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in VOCABULARY \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            out.setdefault("vocabulary", node.lineno)
    return out


def conflict(script: Script, name: str, code: list[str]) -> str | None:
    """Why the copied `code` would see another tokenizer than the script's: it reads what the script changed."""
    changed = changes(script, name)
    if not changed:
        return None
    reads = {m for text in code for m in re.findall(rf"\b{re.escape(name)}\.(\w+)", text)}
    called = any(re.search(rf"\b{re.escape(name)}\s*\(", text) for text in code)
    for attr in sorted(reads):
        needed = DEPENDS.get(attr, attr)
        if needed in changed:
            return (f"it reads `{name}.{attr}`, and the script changes {name}.{needed} (line {changed[needed]}), "
                    "which the recipe's tokenizer does not carry")
    if "vocabulary" in changed and (reads or called):
        return (f"it uses `{name}`, whose tokens the script changes (line {changed['vocabulary']}), which the "
                "recipe's tokenizer does not carry")
    return None
