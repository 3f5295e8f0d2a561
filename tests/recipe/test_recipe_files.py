"""Recipe files grpo cannot read as YAML text (not UTF-8, binary, a device, a named pipe, a looping symlink) and
YAML mistakes (an unclosed quote, a tab, an alias bomb, a missing interpolation): one paragraph that names the
file and line, never a hang or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def _grpo(*args: str | Path, timeout: int = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`grpo ARGS` as a separate process under a time limit (for cases that used to hang)."""
    return subprocess.run([sys.executable, "-m", "grpo_cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_devices_and_named_pipes_are_refused_not_read_forever(tmp_path: Path) -> None:
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    data = tmp_path / "rows.jsonl"
    os.mkfifo(data)
    for args in (["validate", "/dev/zero"], ["validate", fifo], ["validate", DEMO, f"data.files.train={data}"],
                 ["check-rewards", DEMO, "--completions", "/dev/zero"]):
        done = _grpo(*args, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "not a regular file" in " ".join(done.stderr.split()), done.stderr


def test_a_symlink_that_loops_is_one_paragraph(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to("loop.yaml")
    assert_paragraph(run_cli("validate", loop), "points back to itself")


def test_recipe_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(b"description: caf\xe9\n")
    assert_paragraph(run_cli("validate", path), "r.yaml", "UTF-8", "line 1")


def test_binary_recipe(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    assert_paragraph(run_cli("validate", path), "r.yaml", "binary")


def test_unclosed_quote_is_reported_where_the_quote_opens(demo_copy: Path) -> None:
    text = demo_copy.read_text(encoding="utf-8").replace("description: Tiny", 'description: "Tiny')
    lines = text.splitlines()
    opened = next(i for i, line in enumerate(lines, 1) if line.startswith('description: "'))
    demo_copy.write_text(text, encoding="utf-8")
    assert_paragraph(run_cli("validate", demo_copy), f"demo.yaml:{opened}:", "quote")


@pytest.mark.parametrize("text,line", [("model:\n\tname_or_path: bundled:tiny-arith\n", 2),
                                       ("model:\n  name_or_path: x\n\tdtype: auto\n", 3)])
def test_a_tab_in_the_indentation_is_named_as_a_tab(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "tabs.yaml"
    path.write_text(text, encoding="utf-8")
    assert_paragraph(run_cli("validate", path), f"tabs.yaml:{line}:1", "a tab in the indentation", "spaces")


def test_alias_bomb_is_rejected_as_an_alias_bomb(tmp_path: Path) -> None:
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = assert_paragraph(run_cli("validate", path), "bomb.yaml", "alias")
    assert "indentation" not in out


def test_interpolation_of_a_missing_recipe_key(demo_copy: Path) -> None:
    out = assert_paragraph(run_cli("validate", demo_copy, "model.name_or_path=${training.nope}"), "model.name_or_path",
                           "training.nope")
    assert "environment variable" not in out


def test_print_of_a_huge_string_value_does_not_hang(demo_copy: Path) -> None:
    """A 20 MB value: the old --print took minutes (superlinear wrapping); the guard below only catches a hang."""
    huge = "description: " + "x" * 20_000_000 + " Tiny"
    demo_copy.write_text(demo_copy.read_text(encoding="utf-8").replace("description: Tiny", huge), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "validate", str(demo_copy), "--print"],
                          cwd=demo_copy.parent, capture_output=True, timeout=120, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert b"x" * 20_000_000 in proc.stdout  # printed whole, not wrapped into 200,000 lines
