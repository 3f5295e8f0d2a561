"""What `grpo train` refuses before it loads anything: an output directory that is a file, empty or unwritable,
model weights that are damaged, a Hub model on a machine without network (fast, without retries)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ONE_STEP, RECIPES, ROOT, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def test_train_refuses_an_empty_or_unwritable_output_dir_before_loading(tmp_path: Path) -> None:
    assert_paragraph(run_cli("train", DEMO, *ONE_STEP, "-o", ""), "--output-dir", "is empty")
    (tmp_path / "afile").write_text("x")
    assert_paragraph(run_cli("train", DEMO, *ONE_STEP, "-o", tmp_path / "afile" / "run"), "--output-dir",
                     "cannot write the run directory")
    assert (tmp_path / "afile").read_text() == "x"


def test_output_dir_that_is_a_file(demo_copy: Path) -> None:
    afile = demo_copy.parent / "afile"
    afile.write_text("keep me")
    assert_paragraph(run_cli("train", demo_copy, "-o", afile), "afile", "not a directory")
    assert afile.read_text() == "keep me"


@pytest.mark.slow
def test_corrupt_model_weights(demo_copy: Path) -> None:
    model = demo_copy.parent / "model"
    model.mkdir()
    for f in (ROOT / "grpo_cli" / "assets" / "tiny-arith").iterdir():
        if f.is_file():
            (model / f.name).write_bytes(f.read_bytes())
    (model / "model.safetensors").write_bytes(b"\xff" * 1000)
    assert_paragraph(run_cli("train", demo_copy, *ONE_STEP, "model.name_or_path=./model", "-o",
                             demo_copy.parent / "run"), "model.name_or_path", "model.safetensors")


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
