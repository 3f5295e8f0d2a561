"""The README's two set-up commands are what newcomers and CI run: keep them honest."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _bash_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", quick, re.DOTALL)]


def test_readme_has_exactly_two_setup_commands() -> None:
    blocks = _bash_blocks()
    assert len(blocks) == 2
    main, tests = blocks
    assert "grpo train recipes/demo.yaml" in main and "torch==2.13.0" in main
    assert "pytest" in tests and "torch==2.13.0" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line for line in ci.splitlines() if line.strip() and not line.startswith(("#", "set ", "cd "))]
    # Only system packages for the Slurm test may come first (scripts/install_slurm.sh never fails the run);
    # after it, the type checker over grpo_cli/ (docs/architecture.md, "Types"), then only the separate vLLM
    # step: its own environment and the tests marked vllm.
    assert commands[:3] == ["scripts/install_slurm.sh", _bash_blocks()[1], ".venv/bin/mypy"]
    assert all("install_vllm_cpu.sh" in c or "-m vllm" in c for c in commands[3:]), commands[3:]


def test_readme_command_table_names_every_verb() -> None:
    from grpo_cli.cli.commands import VERBS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `grpo ([a-z-]+)", text, re.MULTILINE)) | set(re.findall(r"/ `grpo ([a-z-]+)", text))
    assert {verb for verb, *_ in VERBS} <= listed, {verb for verb, *_ in VERBS} - listed


def test_readme_links_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(((?:docs|recipes|grpo_cli)/[^)#]+)\)", text):
        assert (ROOT / target).exists(), target


def test_every_test_reliability_md_cites_exists() -> None:
    """docs/reliability.md holds each promise with a named test; a renamed or deleted test must not go unnoticed."""
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    cited = set(re.findall(r"tests/((?:\w+/)*test_\w+\.py)::(test_\w+)", text))
    assert len(cited) >= 15
    missing = [f"{f}::{t}" for f, t in sorted(cited)
               if not re.search(rf"^def {t}\(", (ROOT / "tests" / f).read_text(encoding="utf-8"), re.MULTILINE)]
    assert not missing, f"docs/reliability.md cites tests that do not exist: {missing}"


def test_readme_python_snippet_trains_as_it_says(tmp_path) -> None:
    """The notebook example in the README runs as printed (recipe path made absolute, run in a temp dir)."""
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "load_recipe(" in b)
    snippet = snippet.replace('"recipes/demo.yaml"', repr(str(ROOT / "recipes" / "demo.yaml")))
    out = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    status, before, after = out.stdout.strip().splitlines()[-1].split()
    assert status == "completed" and 0.0 <= float(before) <= 1.0 and 0.0 <= float(after) <= 1.0
    assert (tmp_path / "outputs" / "notebook" / "manifest.json").is_file()


def test_each_setup_command_has_its_cpu_torch_variant_right_after_it() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    cpu = "--extra-index-url https://download.pytorch.org/whl/cpu"
    for block in _bash_blocks():
        after = quick.split(block, 1)[1].split("```", 2)[1]  # the text between this block and the next one
        variant = next(line for line in after.splitlines() if cpu in line)
        assert variant.strip(" .`").replace("`", "").split(": ", 1)[-1].replace(f" {cpu}", "") == block, variant
    assert "minutes" in quick.split("Run the tests", 1)[1].split("```", 1)[0]  # what the test command costs
    quick_check = re.search(r"pytest -q ((?:tests/\S+\.py ?)+)", quick)
    assert quick_check and all((ROOT / f).is_file() for f in quick_check.group(1).split())
