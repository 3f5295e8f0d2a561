"""What grpo writes never loses a user's file and never runs what a value smuggles in (issue 35): `grpo import -o`
(no overwrite without --force, never the source, whole or nothing, interrupted cleanly), the GGUF conversion cache
(interrupted and killed conversions leave nothing), and every value in a generated Slurm or SkyPilot script."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import RECIPES, ROOT, run_cli

TRL_CONFIG = ROOT / "tests" / "fixtures" / "imports" / "trl" / "clis_grpo_config.yaml"
DEMO = RECIPES / "demo.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _paragraph(result, *needles: str) -> str:
    assert result.exit_code == 2, result
    assert "Traceback" not in result.output, result
    flat = " ".join(result.output.split())
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{result.output}"
    return flat


# ---------------------------------------------------------------------------- grpo import -o


def test_import_never_overwrites_without_force_and_never_the_source(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    shutil.copy(TRL_CONFIG, config)
    mine = tmp_path / "mine.yaml"
    mine.write_text("my recipe\n", encoding="utf-8")
    _paragraph(run_cli("import", "trl", config, "-o", mine), "-o", "already exists", "--force")
    assert mine.read_text() == "my recipe\n"
    source = config.read_bytes()
    for extra in ([], ["--force"]):
        _paragraph(run_cli("import", "trl", config, "-o", config, *extra), "the config being imported")
        assert config.read_bytes() == source
    (tmp_path / "link.yaml").symlink_to(config)  # the source under another name is still the source
    _paragraph(run_cli("import", "trl", config, "-o", tmp_path / "link.yaml", "--force"), "the config being imported")
    assert config.read_bytes() == source
    forced = run_cli("import", "trl", config, "-o", mine, "--force")
    assert forced.exit_code == 0, forced
    assert mine.read_text().startswith("# Converted by `grpo import trl`")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "link.yaml", "mine.yaml"]  # no temp left


def test_import_onto_a_directory_or_into_a_missing_one(tmp_path: Path) -> None:
    _paragraph(run_cli("import", "trl", TRL_CONFIG, "-o", tmp_path), "-o", "is a directory", "recipe.yaml")
    # a recipe that does not validate writes nothing, so it makes no directory either
    bad = run_cli("import", "trl", TRL_CONFIG, "training.num_generations=3", "-o", tmp_path / "new" / "r.yaml")
    assert bad.exit_code == 2 and "nothing written" in bad.output, bad
    assert list(tmp_path.iterdir()) == []
    good = run_cli("import", "trl", TRL_CONFIG, "-o", tmp_path / "new" / "r.yaml")
    assert good.exit_code == 0 and (tmp_path / "new" / "r.yaml").is_file(), good


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_import_leaves_the_old_file_or_the_new_one_and_nothing_else(tmp_path: Path, sig) -> None:
    """`grpo import -o mine.yaml --force` stopped at several moments: mine.yaml is always whole (the old text or
    the new recipe), "wrote" is printed only when the new recipe is there, and no temporary file stays."""
    old = "my recipe\n" * 1000
    outcomes = set()
    for delay in (0.0, 0.5, 1.0, 1.5, 2.5, 4.0):
        mine = tmp_path / "mine.yaml"
        mine.write_text(old, encoding="utf-8")
        proc = subprocess.Popen([sys.executable, "-m", "grpo_cli", "import", "trl", str(TRL_CONFIG), "-o", str(mine),
                                 "--force"], env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        time.sleep(delay)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
        text = mine.read_text()
        assert text == old or (text.startswith("# Converted by") and text.endswith("\n") and yaml.safe_load(text))
        assert ("wrote " in out) == (text != old), out
        assert "Traceback" not in out, out
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.yaml"], list(tmp_path.iterdir())
        outcomes.add(text == old)
    assert True in outcomes  # at least one signal arrived before the write


def test_write_atomic_interrupted_mid_write_keeps_the_old_file(tmp_path: Path) -> None:
    """A write of 200 MB stopped by SIGTERM while it runs: the target keeps its text, the temporary file is gone."""
    target = tmp_path / "file.txt"
    target.write_text("old\n")
    code = ("import sys; from pathlib import Path; from grpo_cli.paths import write_atomic\n"
            "print('go', flush=True)\n"
            "try:\n    write_atomic(Path(sys.argv[1]), 'x' * 200_000_000)\n"
            "except KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], env=ENV, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "go\n"
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".file.txt.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) in (0, 130)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]
    text = target.read_text()
    assert text == "old\n" or len(text) == 200_000_000
