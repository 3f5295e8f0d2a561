"""What `grpo eval` refuses before any model loads: an empty suite name, an --out that cannot be written, a Hub
model on a machine without network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def test_eval_outputs_are_probed_before_any_model_loads(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    under = tmp_path / "afile" / "eval"
    assert_paragraph(run_cli("eval", DEMO, "--model", "bundled:tiny-arith", "--out", under, "-n", "1"), "--out",
                     "cannot write to")
    assert_paragraph(run_cli("eval", "--suite", "svamp", "--model", "bundled:tiny-arith", "--out", under, "-n", "1"),
                     "--out", "cannot write to")
    assert_paragraph(run_cli("eval", "--suite", "svamp", "--model", "bundled:tiny-arith", "--out", tmp_path / "afile",
                       "-n", "1"), "exists and is a file")


def test_an_empty_suite_name_is_refused_not_ignored() -> None:
    assert_paragraph(run_cli("eval", DEMO, "--suite", ""), "--suite", "no benchmark suite ''", "gsm8k")


@pytest.mark.parametrize("args", [["eval", "--suite", "gsm8k", "--model", "nobody/x"],
                                  ["eval", "--suite", "gsm8k", "nodir"],
                                  ["eval", "DEMO", "--model", "nobody/x", "-n", "1"]],
                         ids=["suite-model", "suite-positional", "recipe-model"])
def test_eval_of_a_hub_model_without_network_fails_fast(demo_copy: Path, args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                            "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="https://hub.grpo-test.invalid", HF_HOME=str(demo_copy.parent / "hf-home"))
    cmd = [sys.executable, "-m", "grpo_cli", *[str(demo_copy) if a == "DEMO" else a for a in args]]
    proc = subprocess.run(cmd, cwd=demo_copy.parent, env=env, capture_output=True, text=True, timeout=40)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "Retrying" not in out
    assert "hub.grpo-test.invalid" in out and "no network" in out
