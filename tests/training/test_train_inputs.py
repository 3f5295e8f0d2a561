"""What `grpo train` refuses before it loads anything: an output directory that is a file, empty or unwritable,
model weights that are damaged, a Hub model on a machine without network (fast, without retries).

The plain refusals are one table (CASES): a small named function that damages the test's folder, the command line
and the words the paragraph must hold; each also checks that the refusal wrote and changed nothing. The Hub checks,
which need a subprocess or a socket, are their own functions below it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ONE_STEP, RECIPES, ROOT, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def _nothing(tmp: Path) -> None:
    """The folder as demo_copy leaves it."""


def _a_file(tmp: Path) -> None:
    (tmp / "afile").write_text("x")


def _a_file_to_keep(tmp: Path) -> None:
    (tmp / "afile").write_text("keep me")


def _corrupt_model(tmp: Path) -> None:
    """A copy of the bundled model whose weights are 1,000 bytes of junk."""
    model = tmp / "model"
    model.mkdir()
    for f in (ROOT / "grpo_cli" / "assets" / "tiny-arith").iterdir():
        if f.is_file():
            (model / f.name).write_bytes(f.read_bytes())
    (model / "model.safetensors").write_bytes(b"\xff" * 1000)


# In the arguments {demo} is the bundled demo recipe, {recipe} its copy in the test's folder (demo_copy), {tmp} that
# folder.
CASES: list[tuple[str, Callable[[Path], None], tuple[str, ...], tuple[str, ...]]] = [
    ("empty-output-dir", _nothing, ("train", "{demo}", *ONE_STEP, "-o", ""), ("--output-dir", "is empty")),
    ("output-dir-under-a-file", _a_file, ("train", "{demo}", *ONE_STEP, "-o", "{tmp}/afile/run"),
     ("--output-dir", "cannot write the run directory")),
    ("output-dir-is-a-file", _a_file_to_keep, ("train", "{recipe}", "-o", "{tmp}/afile"), ("afile", "not a directory")),
    ("corrupt-model-weights", _corrupt_model,
     ("train", "{recipe}", *ONE_STEP, "model.name_or_path=./model", "-o", "{tmp}/run"),
     ("model.name_or_path", "model.safetensors")),
]
SLOW = {"corrupt-model-weights"}  # loads (and fails to load) a model


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a directory): what a refusal must leave as it was."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("damage", "args", "needles"), [
    pytest.param(*c[1:], id=c[0], marks=[pytest.mark.slow] if c[0] in SLOW else []) for c in CASES])
def test_train_refuses_in_one_paragraph_before_writing(demo_copy: Path, damage: Callable[[Path], None],
                                                       args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    tmp = demo_copy.parent
    damage(tmp)
    before = _snapshot(tmp)
    assert_paragraph(run_cli(*[a.format(demo=DEMO, recipe=demo_copy, tmp=tmp) for a in args]), *needles)
    assert _snapshot(tmp) == before  # the user's file kept, no run directory half-written


def test_hub_model_on_a_machine_without_network_fails_fast(demo_copy: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                            "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="https://hub.grpo-test.invalid", HF_HOME=str(demo_copy.parent / "hf-home"))
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(demo_copy), *ONE_STEP,
           "model.name_or_path=someone/some-model", "-o", str(demo_copy.parent / "run")]
    # A hang guard only (loaded CI machines take minutes to import torch); the no-retry promise is the
    # "Retrying" check below: the libraries print it for each of their ~50 s of retries.
    proc = subprocess.run(cmd, cwd=demo_copy.parent, env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "Retrying" not in out
    assert "someone/some-model" in out and "hub.grpo-test.invalid" in out and "network" in out


def test_hub_probe_tells_a_listening_endpoint_from_a_closed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from grpo_cli import paths

    for name in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert paths.hub_unreachable() is None
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # nothing listens on port 1
    assert "127.0.0.1 cannot be reached" in (paths.hub_unreachable() or "")
