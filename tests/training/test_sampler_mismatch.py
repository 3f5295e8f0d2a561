"""`health.sampler_mismatch`: vLLM sampling from other weights than the trainer's is caught from what TRL logs.

The two metrics streams in tests/fixtures/vllm_metrics are real: the demo trained for 60 steps in vLLM colocate
mode on CPU (`.venv-vllm`, TRL 1.16, vLLM 0.31), once as it is (healthy_colocate.jsonl) and once with TRL's weight
sync replaced by a no-op (stale_sync.jsonl), so vLLM kept sampling from the base weights while the trainer learned:
the script is STALE below, and the `-m vllm` test at the end runs it again. The guard is fed those streams as the
Trainer feeds it its logs.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from tests.conftest import RECIPES, ROOT, health_events

DEMO = RECIPES / "demo.yaml"
STREAMS = ROOT / "tests" / "fixtures" / "vllm_metrics"
COLOCATE = ["launch.vllm.mode=colocate"]
GAP = "sampling/sampling_logp_difference/mean"

STALE = '''
import sys
from trl.generation import vllm_generation as vg
from grpo_cli import load_recipe, train


def stale(self):  # the sync "succeeds" and changes nothing: vLLM keeps sampling from the base weights
    return None


stale.grpo_cpu = True  # grpo's CPU colocate sync leaves a marked method alone
vg.VLLMGeneration.sync_weights = stale
result = train(load_recipe(sys.argv[1], ["launch.vllm.mode=colocate", *sys.argv[3:]]), output_dir=sys.argv[2])
print("STATUS", result.status)
'''


def _guards(out: Path, *overrides: str) -> tuple[list[Any], io.StringIO]:
    from grpo_cli import load_recipe
    from grpo_cli.training.learning_guards import all_health_callbacks

    buf = io.StringIO()
    console = Console(file=buf, width=300, highlight=False, color_system=None)
    return all_health_callbacks(load_recipe(DEMO, list(overrides)), out, console=console), buf


def _feed(guards: list[Any], stream: Path, out: Path) -> list[Any]:
    """Each training log of a real run's metrics.jsonl to every guard, at its step, as the Trainer sends it."""
    from transformers import TrainerControl

    controls = []
    for line in stream.read_text().splitlines():
        record = json.loads(line)
        control = TrainerControl()
        state = SimpleNamespace(global_step=record["step"], is_world_process_zero=True, log_history=[])
        for guard in guards:
            if hasattr(guard, "observe"):
                guard.on_log(SimpleNamespace(output_dir=str(out)), state, control, logs=dict(record))
        controls.append(control)
    return controls


def test_a_stale_weight_sync_is_caught_from_the_runs_own_logs(tmp_path: Path) -> None:
    guards, printed = _guards(tmp_path, *COLOCATE)
    controls = _feed(guards, STREAMS / "stale_sync.jsonl", tmp_path)
    mismatch = [e for e in health_events(tmp_path) if e["guard"] == "sampler_mismatch"]
    # The gap was 0.057 nats at step 5 and 0.147 at step 10 (0.49 by step 60): two logs over 0.05.
    assert [(e["step"], e["action"], e["metric"]) for e in mismatch] == [(10, "warn", GAP)]
    assert mismatch[0]["observed"] == pytest.approx(0.1466, abs=1e-3) and mismatch[0]["threshold"] == 0.05
    message = mismatch[0]["message"]
    assert "nats per token" in message and "weight sync that silently failed" in message
    assert "VLLMGeneration.sync_weights" in message
    assert "health warn sampler_mismatch at step 10" in printed.getvalue()
    assert not any(c.should_training_stop for c in controls)


def test_a_healthy_vllm_run_fires_nothing(tmp_path: Path) -> None:
    guards, printed = _guards(tmp_path, *COLOCATE)
    _feed(guards, STREAMS / "healthy_colocate.jsonl", tmp_path)  # gap 0.003-0.006 nats (vLLM bf16, trainer fp32)
    assert not [e for e in health_events(tmp_path) if e["guard"] == "sampler_mismatch"]
    assert "sampler_mismatch" not in printed.getvalue()


def test_stop_ends_the_stale_run_and_the_guard_is_only_there_with_vllm(tmp_path: Path) -> None:
    guards, _ = _guards(tmp_path, *COLOCATE, "health.sampler_mismatch.action=stop")
    controls = _feed(guards, STREAMS / "stale_sync.jsonl", tmp_path)
    stopped = [i for i, c in enumerate(controls) if c.should_training_stop]
    assert stopped == [1] and controls[1].should_save  # the second log (step 10)
    reason = next(g.reason for g in guards if getattr(g, "reason", ""))
    assert "sampler_mismatch" in reason and "--resume" in reason
    assert "sampler_mismatch" not in [getattr(g, "name", "") for g in _guards(tmp_path)[0]]  # vLLM off
    assert "sampler_mismatch" not in [getattr(g, "name", "") for g in
                                      _guards(tmp_path, *COLOCATE, "health.sampler_mismatch.enabled=false")[0]]


def test_the_report_plots_the_gap_and_marks_the_event(tmp_path: Path) -> None:
    from grpo_cli.artefacts.report_data import load_run
    from grpo_cli.artefacts.report_plot import figure

    (tmp_path / "metrics.jsonl").write_text((STREAMS / "stale_sync.jsonl").read_text())
    _feed(_guards(tmp_path, *COLOCATE)[0], STREAMS / "stale_sync.jsonl", tmp_path)
    fig = figure(load_run(tmp_path))
    (panel,) = [ax for ax in fig.axes if ax.get_title() == "vLLM sampler vs trainer"]
    assert panel.get_ylabel() == "nats per token"
    marks = [line.get_xdata()[0] for line in panel.get_lines() if line.get_color() == "orange"]
    assert marks == [10.0]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM is not installed here: scripts/install_vllm_cpu.sh builds .venv-vllm")
def test_a_real_run_with_a_broken_weight_sync_warns(tmp_path: Path) -> None:
    script, out = tmp_path / "stale.py", tmp_path / "run"
    script.write_text(STALE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run([sys.executable, str(script), str(DEMO), str(out), "training.max_steps=20",
                           "training.logging_steps=5", "eval.before_after=false"], env=env, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0 and "STATUS completed" in done.stdout, done.stderr[-4000:]
    mismatch = [e for e in health_events(out) if e["guard"] == "sampler_mismatch"]
    assert mismatch and mismatch[0]["step"] <= 15, health_events(out)
    assert "sampler_mismatch" in (out / "report.md").read_text()
