"""`model.chat_template`: the recipe's own template must load, parse, and render the first prompt."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from grpo_cli.data.derive import dig
from grpo_cli.errors import GrpoError, Problem
from grpo_cli.findings import Findings
from grpo_cli.recipe.schema import Recipe

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight


def _first_record(recipe: Recipe) -> dict[str, Any] | None:
    """The first training record of a local .jsonl/.json file (other formats are not read here)."""
    paths = recipe.data.file_map.get(recipe.data.split) or []
    if not paths:
        return None
    path = recipe.resolve_path(paths[0])
    try:
        if path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as handle:
                line = next((raw for raw in handle if raw.strip()), None)
            return json.loads(line) if line else None
        if path.suffix == ".json":
            rows = json.loads(path.read_text(encoding="utf-8"))
            return rows[0] if isinstance(rows, list) and rows else None
    except (OSError, ValueError):
        return None  # the data checks report a broken file
    return None


def _messages(recipe: Recipe, row: dict[str, Any]) -> list[dict[str, Any]] | None:
    prompt = recipe.data.prompt
    for name, spec in recipe.data.columns.items():  # derived columns, as loading adds them
        row[name] = spec.value if not isinstance(spec, str) else dig(row.get(spec.split(".")[0]),
                                                                      spec.split(".")[1:])
    try:
        value = row[prompt.column] if prompt.column else (prompt.template or "").format(**row)
    except (KeyError, IndexError, ValueError):
        return None  # the data checks name the missing column
    messages = list(value) if isinstance(value, list) else [{"role": "user", "content": str(value)}]
    if prompt.system_prompt and not (messages and messages[0].get("role") == "system"):
        messages = [{"role": "system", "content": prompt.system_prompt}, *messages]
    return messages


def check_chat_template(recipe: Recipe, pf: Preflight) -> Findings:
    """Load the recipe's template, parse it, render the first prompt into the plan."""
    if recipe.model.chat_template is None:
        return Findings()
    from grpo_cli.models.loading import chat_template_text
    from grpo_cli.tools.template import load_template, render

    try:
        template = chat_template_text(recipe) or ""
    except GrpoError as exc:
        return Findings(problems=[exc.problems[0]])
    found = Findings(warnings=[] if recipe.data.prompt.chat else [
        "model.chat_template is set but data.prompt.chat is false: training prompts are plain text, so the "
        "template is only saved with the model (and used by `grpo eval` on chat prompts)"])
    local = recipe.local_model_dir(recipe.model.name_or_path)
    config = load_template(local)[1] if local is not None else {}
    row = _first_record(recipe)
    messages = _messages(recipe, dict(row)) if row is not None and recipe.data.prompt.chat else None
    try:
        if messages is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            ImmutableSandboxedEnvironment().parse(template)
            found.plan["chat template"] = "from the recipe (first prompt not rendered: no local .jsonl/.json chat row)"
            return found
        text = render(template, config, messages, add_generation_prompt=True)
    except Exception as exc:  # jinja2's TemplateSyntaxError / TemplateError / UndefinedError ...
        found.problems.append(Problem("model.chat_template", f"the template cannot render the first prompt: "
                                      f"{type(exc).__name__}: {exc}", "Fix the template (it is Jinja, as in "
                                      "tokenizer_config.json's chat_template)."))
        return found
    found.plan["chat template"] = f"from the recipe; first prompt renders as {text[:300]!r}"
    return found
