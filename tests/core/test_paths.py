"""The package root's one rule for what a model or data reference points to (`paths.py`): bundled, package,
absolute, recipe-relative, Hub ids told from paths, the Hub cache; and its atomic write, which an interrupt
never leaves half-done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo_cli import paths
from tests.conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def test_one_rule_for_references(tmp_path: Path, monkeypatch) -> None:
    recipe_dir, cwd = tmp_path / "recipes", tmp_path / "cwd"
    for d in (recipe_dir / "m", cwd / "m", cwd / "only_here"):
        d.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    assert paths.resolve("bundled:tiny-arith", recipe_dir) == paths.ASSETS_DIR / "tiny-arith"
    assert paths.resolve("m", recipe_dir) == recipe_dir / "m"  # the recipe's directory first
    assert paths.resolve("only_here", recipe_dir) == Path.cwd() / "only_here"  # then the current one
    assert paths.resolve("m") == Path.cwd() / "m"  # flags: the current directory
    assert paths.resolve("missing", recipe_dir) == recipe_dir / "missing"  # errors name the recipe's place
    assert paths.local_dir("Qwen/Qwen2.5-0.5B-Instruct", recipe_dir) is None  # a hub id
    assert paths.local_dir("./models/not-yet", recipe_dir) == recipe_dir / "models/not-yet"  # looks like a path


def test_hub_ids_are_told_from_paths() -> None:
    assert paths.is_hub_id("Qwen/Qwen2.5-0.5B-Instruct") and paths.is_hub_id("gpt2")
    assert not paths.is_hub_id("gpt2", owner=True)  # a model card's base_model needs owner/name
    for local in ("./models/x", "/abs/model", "~/m", "bundled:tiny-arith", "a/b/c", "models\\x"):
        assert not paths.is_hub_id(local), local


def test_hub_cache_lookup_by_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snap = tmp_path / "models--org--name" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (tmp_path / "models--org--name" / "refs").mkdir()
    (tmp_path / "models--org--name" / "refs" / "main").write_text("abc")
    assert paths.hub_cache_file("org/name", "config.json") is None
    (snap / "config.json").write_text("{}")
    assert paths.hub_cache_file("org/name", "config.json") == str(snap / "config.json")


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
