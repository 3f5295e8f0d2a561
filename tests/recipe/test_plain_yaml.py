"""A plain recipe is read without OmegaConf, and must give exactly what OmegaConf gives.

Each case is read by both `plain_yaml.plain_recipe` and the OmegaConf path (`resolve_with_omegaconf`, the
one every recipe went through before); `repr` compares values and their types (1 vs 1.0 vs True, nan).
What the plain reader is unsure of must come back None, so that OmegaConf reads it and reports problems.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_cli.recipe.plain_yaml import plain_recipe
from grpo_cli.recipe.resolve import resolve_with_omegaconf
from tests.conftest import ROOT

RECIPES = ROOT / "recipes"

SAME = {
    "floats": """
        a: 1e-5
        b: 1.0e-5
        c: .5
        d: -.inf
        e: .nan
        f: 3.
        g: 1_000.5
        h: 6.8523015e+5
        i: 190:20:30.15
        j: +12e03
    """,
    "ints_and_bools": """
        a: 1_000
        b: 0x1F
        c: 0o17
        d: 017
        e: 1:30
        f: 0b101
        g: yes
        h: Off
        i: true
        j: TRUE
        k: -0
        l: 12345678901234567890
    """,
    "nulls_and_strings": """
        a: null
        b: ~
        c:
        d: "quoted: text # not a comment"
        e: 'single ''quotes'''
        f: 2024-01-01
        g: 2001-12-14t21:59:43.10-05:00
        h: "1e-5"
        i: caf\u00e9 \u2713
        j: "$HOME and $ dollars"
        k: a {b} c
    """,
    "blocks_and_flow": """
        description: >
          folded
          text
        system: |
          line one
            indented
          line three
        flow: {a: 1, b: [x, 2, 3.5, null]}
        nested:
          - name: accuracy
            params: {answer_format: first_number}
          - name: format
            weight: 0.25
        empty_list: []
        empty_map: {}
    """,
    "document_markers": """
        ---
        # a comment
        model: {name_or_path: x}  # trailing comment
        ...
    """,
}

UNSURE = {
    "alias": "base: &b {lr: 1}\nother: *b\n",
    "merge_key": "base: &b {lr: 1}\nother:\n  <<: *b\n  x: 2\n",
    "duplicate_key": "a: 1\na: 2\n",
    "binary_tag": "a: !!binary aGVsbG8=\n",
    "set_tag": "a: !!set {x, y}\n",
    "custom_tag": "a: !thing 1\n",
    "int_key": "1: a\n",
    "bool_key": "yes: a\n",
    "interpolation": "a: 1\nb: ${a}\n",
    "env_interpolation": "a: ${oc.env:HOME}\n",
    "missing_value": "a: ???\n",
    "extends": "extends: other.yaml\na: 1\n",
    "two_documents": "a: 1\n---\nb: 2\n",
    "syntax_error": "a: [1, 2\n",
    "top_level_list": "- a\n- b\n",
    "top_level_scalar": "just text\n",
    "empty": "\n# nothing\n",
    "python_path_tag": "a: !!python/object/apply:pathlib.Path [x]\n",
}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(SAME))
def test_plain_reader_gives_what_omegaconf_gives(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, name, SAME[name])
    plain = plain_recipe(path)
    assert plain is not None, "a plain recipe should not need OmegaConf"
    assert repr(plain) == repr(resolve_with_omegaconf(path))


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_recipes_read_the_same_either_way(recipe: Path) -> None:
    plain = plain_recipe(recipe)
    if "extends:" in recipe.read_text(encoding="utf-8"):
        assert plain is None
    else:
        assert plain is not None and repr(plain) == repr(resolve_with_omegaconf(recipe))


@pytest.mark.parametrize("name", sorted(UNSURE))
def test_what_the_plain_reader_is_unsure_of_goes_to_omegaconf(tmp_path: Path, name: str) -> None:
    assert plain_recipe(_write(tmp_path, name, UNSURE[name])) is None


def test_binary_and_non_utf8_files_go_to_omegaconf(tmp_path: Path) -> None:
    binary, latin = tmp_path / "binary.yaml", tmp_path / "latin.yaml"
    binary.write_bytes(b"a: 1\n\x00\x01")
    latin.write_bytes("a: caf\u00e9\n".encode("latin-1"))
    assert plain_recipe(binary) is None and plain_recipe(latin) is None


def test_a_document_over_omegaconfs_node_limit_goes_to_omegaconf(tmp_path: Path) -> None:
    """OmegaConf refuses documents of more than 10,000 nodes; the plain reader must not accept them."""
    under = _write(tmp_path, "under", "a: [" + ", ".join(["1"] * 9_990) + "]\n")
    over = _write(tmp_path, "over", "a: [" + ", ".join(["1"] * 10_000) + "]\n")
    assert plain_recipe(under) is not None
    assert plain_recipe(over) is None


def test_validating_a_plain_recipe_does_not_import_omegaconf() -> None:
    code = ("import sys; sys.argv = ['grpo', 'validate', 'recipes/gsm8k.yaml']\n"
            "from grpo_cli.cli.commands import app_for\n"
            "try:\n    app_for(sys.argv[1:])()\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print(code, 'omegaconf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split()[-2:] == ["0", "False"], out.stdout + out.stderr
