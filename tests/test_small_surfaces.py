"""Round 2 of what a user sees, the small things: memory on the cpu profile is host RAM, a typo in an override
names the override, an option that is a recipe key gets its override, weight files are as readable as the rest."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

DEMO = RECIPES / "demo.yaml"


def test_memory_on_the_cpu_profile_is_headed_host_ram() -> None:
    result = run_cli("memory", DEMO)
    assert result.exit_code == 0, result
    assert "memory in host RAM: bundled:tiny-arith, profile cpu" in result.output
    assert "total in host RAM" in result.output and "per GPU" not in result.output
    gpu = run_cli("memory", DEMO, "launch.profile=single", "--gpu-memory-gb", "80")
    assert "memory per GPU" in gpu.output and "total per GPU" in gpu.output


def test_a_typo_in_an_override_names_the_override() -> None:
    result = run_cli("validate", DEMO, "traning.max_steps=3")
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "The command-line override `traning.max_steps=3` is not valid: traning: unknown key" in text, text
    assert "Recipe" not in text
    two = " ".join(run_cli("validate", DEMO, "training.max_steps=abc", "model.lora.rr=4").output.split())
    assert "with its command-line overrides is not valid (2 problems)" in two
    assert "model.lora.rr (override `model.lora.rr=4`): unknown key" in two


def test_an_option_that_is_a_recipe_key_gets_its_override() -> None:
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "train", str(DEMO), "--max-steps", "3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    text = " ".join(proc.stderr.split())
    assert "--max-steps is not an option of `grpo train`" in text and "training.max_steps=3" in text, text
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "validate", str(DEMO), "--dtype=float32"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "model.dtype=float32" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "validate", str(DEMO), "--bogus"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "No such option: --bogus" in proc.stderr  # no recipe key: Click's own word


def test_check_rewards_shows_one_row_per_probe_and_a_verdict_per_reward(tmp_path: Path) -> None:
    (tmp_path / "flat.py").write_text("def flat(completions, **kwargs):\n    return [0.5 for _ in completions]\n",
                                      encoding="utf-8")
    recipe = tmp_path / "two.yaml"
    recipe.write_text(f"extends: {DEMO}\nrewards:\n  - {{name: accuracy, params: {{answer_format: first_number}}}}\n"
                      "  - {function: flat.py:flat}\n", encoding="utf-8")
    result = run_cli("check-rewards", recipe, "--samples", "8")
    assert result.exit_code == 1, result  # the flat reward is a violation
    lines = result.output.splitlines()
    assert "score per probe over 8 data rows" in result.output
    assert sum(1 for ln in lines if ln.startswith("│ reference ")) == 1  # not one per data row
    accuracy = next(ln for ln in lines if ln.startswith("│ accuracy "))
    flat = next(ln for ln in lines if ln.startswith("│ flat ") or ln.startswith("│ flat.py"))
    assert "✓ pass (reference 1, wrong 0)" in accuracy, accuracy
    assert "✗ constant" in flat, flat


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


def test_launch_slurm_writes_into_the_run_and_asks_no_gpus_for_the_cpu_demo(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import shlex

    monkeypatch.chdir(tmp_path)
    refused = run_cli("launch", "slurm", DEMO)
    assert refused.exit_code == 2 and "On CPU nodes" in refused.output
    corrected = " ".join(refused.output.split()).split("Corrected command: ", 1)[1]
    assert corrected.endswith("launch.profile=ddp launch.num_processes=2 --nodes 1 --gpus-per-node 0"), corrected
    result = run_cli(*shlex.split(corrected)[1:])
    assert result.exit_code == 0, result
    script = tmp_path / "outputs" / "demo" / "launch" / "grpo-demo.sbatch"
    text = script.read_text()
    assert "--gpus-per-node" not in "".join(ln for ln in text.splitlines() if ln.startswith("#SBATCH"))
    assert f'#SBATCH --output="{script.parent}/%x-%j.out"' in text
    assert not list(tmp_path.glob("*.sbatch"))
    from grpo_cli.runs import plan_output_dir

    assert not plan_output_dir(script.parent.parent, resume=None, force=False, policy="fail").replace
