"""`grpo train` really trains the bundled tiny model and leaves a complete, resumable run behind."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "demo.yaml"
# A few quick steps: small generation batches, no before/after evaluation.
FAST = ["training.max_steps=3", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def test_train_in_process_changes_weights_and_writes_a_complete_run(tmp_path: Path) -> None:
    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    result = train(load_recipe(DEMO, FAST), output_dir=out)
    assert result.status == "completed" and result.global_step == 3

    before = _weights(ROOT / "grpo_cli" / "assets" / "tiny-arith" / "model.safetensors")
    after = _weights(out / "model.safetensors")
    changed = [k for k in before if not (before[k] == after[k]).all()]
    assert changed, "training left every weight unchanged"

    for name in ("tokenizer.json", "config.json", "recipe.yaml", "manifest.json", "metrics.jsonl"):
        assert (out / name).exists(), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["global_step"] == 3
    assert manifest["seed"] == 42 and manifest["started"] and manifest["finished"]
    assert {"torch", "transformers", "trl", "python"} <= set(manifest["versions"])
    assert manifest["hardware"]["cpu_count"] and manifest["command"]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "reward" in r]
    assert steps == [1, 2, 3]
    assert all("rewards/accuracy/mean" in r for r in records if "reward" in r)
    assert list(out.glob("runs/**/events.out.tfevents*")), "no TensorBoard events written"
    saved = (out / "recipe.yaml").read_text()
    assert "max_steps: 3" in saved  # the resolved recipe, overrides included


def test_cli_trains_chat_prompts_with_lora(tmp_path: Path) -> None:
    out = tmp_path / "lora"
    # The tiny model was pre-trained on plain prompts, so under its chat template accuracy is ~0 for every
    # completion; a length-shaped reward still tells completions apart, so the adapter gets gradients.
    length_reward = "rewards=[{name: soft_overlong_punishment, params: {max_completion_len: 4, soft_punish_cache: 3}}]"
    result = run_cli("train", DEMO, *FAST, "data.prompt.chat=true", "model.lora.r=4", "model.lora.alpha=8",
                     "model.lora.dropout=0.0", length_reward, "-o", out)
    assert result.exit_code == 0, result.output
    assert "completed at step 3" in result.output
    assert "soft_overlong_punishment" in result.output and "first vs last" in result.output
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4
    adapter = _weights(out / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b), "LoRA B matrices are still at their zero init"
    assert not (out / "model.safetensors").exists()  # only the adapter is saved


def test_non_empty_output_dir_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    result = run_cli("train", DEMO, *FAST, "-o", out)
    assert result.exit_code == 2
    assert "not empty" in result.output and "--resume" in result.output and "--force" in result.output
    assert "Traceback" not in result.output
    assert (out / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]


def test_quantization_on_cpu_is_a_clear_error(tmp_path: Path) -> None:
    result = run_cli("train", DEMO, *FAST, "model.quantization=4bit", "model.lora.r=4", "-o", tmp_path / "q")
    assert result.exit_code == 2
    assert "model.quantization" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "q").exists()


def _wait_for_steps(metrics: Path, n: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"training exited early: {proc.stdout.read() if proc.stdout else ''}")
        if metrics.exists() and sum(1 for line in metrics.read_text().splitlines() if '"reward"' in line) >= n:
            return
        time.sleep(0.2)
    raise AssertionError("training did not log in time")


def test_sigterm_saves_a_checkpoint_and_resume_continues_at_that_step(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    args = [sys.executable, "-m", "grpo_cli", "train", str(DEMO), "training.max_steps=200",
            "training.per_device_train_batch_size=8", "training.num_generations=4", "training.logging_steps=1",
            "eval.before_after=false", "-o", str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for_steps(out / "metrics.jsonl", 3, proc)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert "SIGTERM" in output
    hint = re.search(r"continue with `(grpo train [^`\n]+)`", output)  # on one line: it pastes as it stands
    assert hint, output
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert checkpoints, output
    stopped_at = int(checkpoints[-1].name.split("-")[1])
    state = json.loads((checkpoints[-1] / "trainer_state.json").read_text())
    assert state["global_step"] == stopped_at >= 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"

    # The printed command works as it stands (one more override only shortens the run for the test).
    resume_args = shlex.split(hint.group(1))[2:]
    assert "-o" in resume_args and "--resume" in resume_args
    resumed = run_cli("train", *resume_args, f"training.max_steps={stopped_at + 2}")
    assert resumed.exit_code == 0, resumed.output
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "reward" in r]
    assert steps[-2:] == [stopped_at + 1, stopped_at + 2]  # continued, not restarted
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["resumed_from"].endswith(checkpoints[-1].name)


def test_force_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    out = tmp_path / "home"
    out.mkdir()
    (out / "notes.txt").write_text("not a run")
    result = run_cli("train", DEMO, *FAST, "-o", out, "--force")
    assert result.exit_code == 2 and "does not look like a grpo run" in result.output
    assert (out / "notes.txt").exists()


def test_force_keeps_the_old_run_when_the_new_one_cannot_start(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run_cli("train", DEMO, *FAST, "-o", out).exit_code == 0
    before = (out / "manifest.json").read_text()
    # The new run fails while loading (no such model): the previous run must survive untouched.
    result = run_cli("train", DEMO, *FAST, "model.name_or_path=./no-such-model", "-o", out, "--force")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (out / "manifest.json").read_text() == before
    # The new run starts, then fails at step 0 (its reward raises): the previous run must survive as well.
    (tmp_path / "boom.py").write_text("def boom(completions, **kwargs):\n    raise ValueError('no')\n")
    result = run_cli("train", DEMO, *FAST, f"rewards=[{{function: {tmp_path / 'boom.py'}:boom}}]", "-o", out,
                     "--force")
    assert result.exit_code == 2 and "boom" in result.output, result.output
    assert (out / "manifest.json").read_text() == before
    assert (out / "model.safetensors").exists() and (out / "metrics.jsonl").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")], "a moved-aside copy was left behind"


def test_resume_with_a_different_lora_setting_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "lora"
    args = [*FAST, "training.save_strategy=steps", "training.save_steps=2", "model.lora.r=4"]
    assert run_cli("train", DEMO, *args, "-o", out).exit_code == 0
    saved = (out / "recipe.yaml").read_text()
    result = run_cli("train", DEMO, *FAST, "training.max_steps=4", "-o", out, "--resume")
    assert result.exit_code == 2 and "model.lora" in result.output and "Traceback" not in result.output
    assert (out / "recipe.yaml").read_text() == saved  # the run's record is untouched


def test_a_reward_that_raises_during_training_names_the_reward(tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text("def boom(completions, **kwargs):\n    return [1 / 0 for _ in completions]\n")
    result = run_cli("train", DEMO, *FAST, f"rewards=[{{function: {tmp_path / 'boom.py'}:boom}}]",
                     "-o", tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert "rewards[0]" in result.output and "'boom' raised ZeroDivisionError" in result.output
    assert "check-rewards" in result.output and "Traceback" not in result.output


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.slow
def test_weight_files_are_as_readable_as_the_rest(tmp_path: Path) -> None:
    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    result = train(load_recipe(DEMO, ["training.max_steps=2", "training.per_device_train_batch_size=8",
                                      "training.num_generations=4", "eval.before_after=false", "model.lora.r=4",
                                      "training.save_strategy=steps", "training.save_steps=1"]), output_dir=out)
    assert result.status == "completed"
    expected = _mode(out / "adapter_config.json")
    assert expected & stat.S_IROTH  # the umask here (022) makes the rest world-readable
    weights = list(out.rglob("*.safetensors"))
    assert len(weights) >= 3 and all(_mode(w) == expected for w in weights), {str(w): oct(_mode(w)) for w in weights}
    merged = tmp_path / "merged"
    assert run_cli("merge", out, "--out", merged).exit_code == 0
    assert _mode(merged / "model.safetensors") == _mode(merged / "config.json") == expected
