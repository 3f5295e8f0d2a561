"""The built-in reward reference: generated from the docstrings, never stale, and its examples run."""

from __future__ import annotations

import doctest
import importlib

import pytest

from grpo_cli.rewards.builtins import BUILTINS
from grpo_cli.rewards.docs import builtins_markdown, generated_block, write_into
from tests.conftest import ROOT, run_cli


def test_docs_rewards_reference_is_up_to_date() -> None:
    assert generated_block(ROOT / "docs" / "rewards.md") == builtins_markdown(), (
        "docs/rewards.md is stale: run `grpo schema --rewards --out docs/rewards.md`")


@pytest.mark.parametrize("module", ["answers", "formats", "length", "code"])
def test_builtin_docstring_examples_run(module: str) -> None:
    mod = importlib.import_module(f"grpo_cli.rewards.builtins.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_documents_its_params_and_shows_an_example(name: str) -> None:
    section = builtins_markdown([name])
    assert f"## `{name}`" in section and "```python\n>>> " in section
    for line in section.splitlines():
        if line.startswith("| `") and line.count("|") == 4 and "param" not in line:
            assert not line.rstrip().endswith("|  |"), f"{name}: a param without a description: {line}"


def test_schema_rewards_rewrites_only_the_generated_block(tmp_path) -> None:
    doc = tmp_path / "rewards.md"
    doc.write_text("# Mine\n\nintro\n\n<!-- builtins:begin (old) -->\nstale\n<!-- builtins:end -->\n\nouttro\n")
    unmarked = tmp_path / "unmarked.md"
    unmarked.write_text("no markers here\n")
    with pytest.raises(ValueError, match="markers"):
        write_into(unmarked, builtins_markdown())
    doc.write_text(doc.read_text().replace("<!-- builtins:begin (old) -->",
                                           builtins_markdown().splitlines()[0]))
    result = run_cli("schema", "--rewards", "--out", doc)
    assert result.exit_code == 0, result
    text = doc.read_text()
    assert text.startswith("# Mine\n\nintro\n\n") and text.endswith("\n\nouttro\n")
    assert "stale" not in text and "## `accuracy`" in text
