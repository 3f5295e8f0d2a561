"""`grpo validate` on recipes with tools and environments: every static error names its key and says how to fix it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import assert_paragraph, run_cli

GOOD_TOOLS = '''
import asyncio


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


def no_hints(a, b: int) -> int:
    """Add.

    Args:
        a: first
        b: second
    """
    return a + b


def no_doc(a: int) -> int:
    return a


def no_args_section(a: int) -> int:
    """Return a."""
    return a


def half_documented(a: int, b: int) -> int:
    """Add.

    Args:
        a: first
    """
    return a + b


def star_args(*numbers: int) -> int:
    """Sum.

    Args:
        numbers: the numbers
    """
    return sum(numbers)


def scaled(x: int, factor: int) -> int:
    """Scale x.

    Args:
        x: the number
    """
    return x * factor


async def slow_echo(text: str) -> str:
    """Echo after a pause.

    Args:
        text: what to echo
    """
    await asyncio.sleep(0)
    return text
'''

ENVS = '''
class Counter:
    """Counts calls."""

    def __init__(self, start: int = 0):
        self.start = start
        self.count = start

    def reset(self, **kwargs) -> str:
        self.count = self.start
        return ""

    def increment(self, by: int) -> int:
        """Add to the counter.

        Args:
            by: how much
        """
        self.count += by
        return self.count


class NoReset:
    def increment(self, by: int) -> int:
        """Add.

        Args:
            by: how much
        """
        return by


class OnlyReset:
    def reset(self, **kwargs) -> None:
        return None


class StrictReset:
    def reset(self) -> None:
        return None

    def look(self) -> str:
        """Look around."""
        return "a room"
'''

ROWS = '{"question": "1+2", "answer": "3"}\n{"question": "2+2", "answer": "4"}\n'


def _recipe(tmp_path: Path, extra: str, *, chat: bool = True, model: str = "bundled:tiny-tool",
            rows: str = ROWS) -> Path:
    (tmp_path / "tools.py").write_text(GOOD_TOOLS, encoding="utf-8")
    (tmp_path / "envs.py").write_text(ENVS, encoding="utf-8")
    (tmp_path / "data.jsonl").write_text(rows, encoding="utf-8")
    text = textwrap.dedent(f"""
        model: {{name_or_path: "{model}"}}
        data:
          files: data.jsonl
          prompt: {{template: "{{question}}", chat: {str(chat).lower()}}}
        rewards: [{{name: accuracy}}]
        training: {{num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 32}}
        launch: {{profile: cpu}}
        """) + textwrap.dedent(extra)
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_tools_and_environment_show_in_the_plan(tmp_path: Path) -> None:
    path = _recipe(tmp_path, """
        tools:
          - tools.py:add
          - {function: tools.py:scaled, params: {factor: 3}, timeout: 2}
          - tools.py:slow_echo
        environment: {factory: envs.py:Counter, params: {start: 5}}
        """)
    result = run_cli("validate", path)
    assert result.exit_code == 0, result
    flat = " ".join(result.output.split())
    assert "add(a, b)" in flat and "scaled(x)" in flat  # the bound `factor` is not shown to the model
    assert "async slow_echo(text)" in flat
    assert "Counter: tools increment" in flat


@pytest.mark.parametrize("tool,needles", [
    ("missing.py:add", ("tools[0].function", "missing.py not found")),
    ("tools.py:ad", ("tools[0].function", "has no function 'ad'", "Did you mean `add`")),
    ("tools.py:no_hints", ("tools[0].function", "no type hint for a")),
    ("tools.py:no_doc", ("tools[0].function", "has no docstring", "Args:")),
    ("tools.py:no_args_section", ("tools[0].function", "no `Args:` section")),
    ("tools.py:half_documented", ("tools[0].function", "does not describe b under `Args:`")),
    ("tools.py:star_args", ("tools[0].function", "takes *numbers")),
    ("{function: tools.py:add, params: {c: 1}}", ("tools[0].params.c", "'c' is not a parameter of add")),
    ("tools.py", ("tools[0]", "not a reference")),
    ("binary.py:add", ("tools[0].function", "binary.py", "binary file")),
    ("latin1.py:add", ("tools[0].function", "latin1.py", "not UTF-8", "line 2")),
])
def test_tool_errors(tmp_path: Path, tool: str, needles: tuple[str, ...]) -> None:
    (tmp_path / "binary.py").write_bytes(b"\x00\x9f\x92\x96" * 64)
    (tmp_path / "latin1.py").write_bytes(b"def add(a: int) -> str:\n    return 'caf\xe9'\n")
    assert_paragraph(run_cli("validate", _recipe(tmp_path, f"tools: [{tool}]\n")), *needles)


@pytest.mark.parametrize("env,needles", [
    ("envs.py:NoReset", ("environment.factory", "has no `reset` method")),
    ("envs.py:OnlyReset", ("environment.factory", "no public method for the model to call")),
    ("envs.py:StrictReset", ("environment.factory", "reset does not accept **kwargs")),
    ("envs.py:Countr", ("environment.factory", "has no class 'Countr'", "Did you mean `Counter`")),
    ("{factory: {a: envs.py:Counter}, params: {b: {}}}", ("environment", "'b' is not an environment name")),
    ("{factory: envs.py:Counter, params: {nope: 1}}", ("environment.params.nope", "'nope' is not a parameter of "
                                                       "Counter.__init__", "start")),
    ("{factory: {a: envs.py:Counter}, params: {a: {nope: 1}}}", ("environment.params.a.nope",)),
])
def test_environment_errors(tmp_path: Path, env: str, needles: tuple[str, ...]) -> None:
    assert_paragraph(run_cli("validate", _recipe(tmp_path, f"environment: {env}\n")), *needles)


def test_routed_environments_need_an_environment_column(tmp_path: Path) -> None:
    path = _recipe(tmp_path, "environment: {a: envs.py:Counter, b: envs.py:Counter}\n")
    assert_paragraph(run_cli("validate", path), "environment.factory", "`environment` column",
                     "columns: question, answer")
    routed = ROWS.replace('"answer": "3"}', '"answer": "3", "environment": "a"}').replace(
        '"answer": "4"}', '"answer": "4", "environment": "b"}')
    ok = _recipe(tmp_path, "environment: {a: envs.py:Counter, b: envs.py:Counter}\n", rows=routed)
    assert run_cli("validate", ok).exit_code == 0


def test_tools_need_chat_prompts(tmp_path: Path) -> None:
    assert_paragraph(run_cli("validate", _recipe(tmp_path, "tools: [tools.py:add]\n", chat=False)),
                     "data.prompt.chat", "tools need chat prompts", "chat: true")


def test_tool_setting_without_tools_is_a_warning(tmp_path: Path) -> None:
    path = _recipe(tmp_path, "")
    result = run_cli("validate", path, "training.max_tool_calling_iterations=3")
    assert result.exit_code == 0, result.output
    assert "max_tool_calling_iterations is set but the recipe has no `tools`" in " ".join(result.output.split())
    assert "max_tool_calling_iterations" not in run_cli("validate", path).output


def test_chat_template_without_tool_support_is_refused(tmp_path: Path) -> None:
    # tiny-arith's template prints `role: content` lines only: tool calls and tool names vanish.
    assert_paragraph(run_cli("validate", _recipe(tmp_path, "tools: [tools.py:add]\n", model="bundled:tiny-arith")),
                     "model.name_or_path", "does not render a tool-calling conversation")


def test_transformers_floors() -> None:
    from grpo_cli.recipe.schema import EnvironmentSection, ToolEntry
    from grpo_cli.tools.static import ToolCheck, version_checks

    class R:
        tools = [ToolEntry(function="t.py:f")]
        environment = EnvironmentSection(factory="e.py:E")

    out = ToolCheck()
    version_checks(R(), out, installed="5.1.0")
    assert [p.where for p in out.problems] == ["environment"]
    assert "transformers >= 5.2.0" in out.problems[0].what
    out = ToolCheck()
    version_checks(R(), out, installed="4.57.1")
    assert [p.where for p in out.problems] == ["tools", "environment"]


def test_template_that_is_not_prefix_preserving_or_has_no_parser_warns(tmp_path: Path) -> None:
    import json
    import shutil

    from grpo_cli.paths import ASSETS_DIR

    model = tmp_path / "model"
    shutil.copytree(ASSETS_DIR / "tiny-tool", model)
    template = (model / "chat_template.jinja").read_text(encoding="utf-8")
    # Mark the last message: appending a tool result then changes how the assistant turn before it renders.
    (model / "chat_template.jinja").write_text(template.replace("{{ '\\n' }}{% endfor %}",
                                                                "{% if loop.last %}{{ '.' }}{% endif %}{{ '\\n' }}"
                                                                "{% endfor %}"), encoding="utf-8")
    config = json.loads((model / "tokenizer_config.json").read_text(encoding="utf-8"))
    del config["response_template"]
    (model / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    result = run_cli("validate", _recipe(tmp_path, "tools: [tools.py:add]\n", model=str(model)))
    assert result.exit_code == 0, result
    flat = " ".join(result.output.split())
    assert "is not prefix-preserving" in flat
    assert "has no response_template" in flat


def test_two_tools_with_one_name_are_refused(tmp_path: Path) -> None:
    """TRL keeps only the last of two same-named tools: the model could never call the other."""
    (tmp_path / "more.py").write_text('def add(a: int, b: int) -> int:\n    """Add.\n\n    Args:\n        a: x\n'
                                      '        b: y\n    """\n    return a + b\n', encoding="utf-8")
    path = _recipe(tmp_path, "tools: [tools.py:add, more.py:add]\n")
    assert_paragraph(run_cli("validate", path), "tools[1].function",
                     "tool name 'add' is already used by tools[0].function")
    clash = _recipe(tmp_path, "tools: [tools.py:add]\nenvironment: envs.py:Counter\n")
    (tmp_path / "envs.py").write_text((tmp_path / "envs.py").read_text().replace("def increment", "def add"))
    assert_paragraph(run_cli("validate", clash), "environment.factory (Counter.add)",
                     "already used by tools[0].function")
