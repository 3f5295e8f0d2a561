"""Round 4 of the hostile sweep (docs/reliability.md, "Round 4"): each case it found, run through the real CLI
(or the real script): one paragraph, exit 2, no traceback, no hang, no user file replaced without --force."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

DEMO = RECIPES / "demo.yaml"
FAST = ["training.max_steps=1", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]


def _paragraph(result, *needles: str) -> str:
    """Assert exit 2, no traceback, and every needle in the message (whitespace-insensitive)."""
    assert result.exit_code == 2, result
    assert "Traceback" not in result.output, result
    flat = " ".join(result.output.split())
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{result.output}"
    return flat


def _grpo(*args: str | Path, timeout: int = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`grpo ARGS` as a separate process under a time limit (for cases that used to hang)."""
    return subprocess.run([sys.executable, "-m", "grpo_cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


# ---------------------------------------------------------------------------- files that are not text files


@pytest.mark.parametrize("content, needles", [(b"\xff\xfe\x00\x01", ["not UTF-8"]), (None, ["is a directory"])])
def test_completions_and_examples_files_that_are_not_text(tmp_path: Path, content, needles) -> None:
    path = tmp_path / "given.jsonl"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content.replace(b"\x00", b""))
    _paragraph(run_cli("check-rewards", DEMO, "--completions", path), "completions file", *needles)
    _paragraph(run_cli("check-tools", RECIPES / "tools-demo.yaml", "--no-model", "--examples", path), "--examples",
               *needles)


def test_devices_and_named_pipes_are_refused_not_read_forever(tmp_path: Path) -> None:
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    data = tmp_path / "rows.jsonl"
    os.mkfifo(data)
    for args in (["validate", "/dev/zero"], ["validate", fifo], ["validate", DEMO, f"data.files.train={data}"],
                 ["check-rewards", DEMO, "--completions", "/dev/zero"]):
        done = _grpo(*args, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "not a regular file" in " ".join(done.stderr.split()), done.stderr


def test_a_symlink_that_loops_is_one_paragraph(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to("loop.yaml")
    _paragraph(run_cli("validate", loop), "points back to itself")


# ---------------------------------------------------------------------------- numbers that failed only later


@pytest.mark.parametrize("args, needles", [
    (["--threads", "99999999999"], ["launch.threads", "less than or equal to 4096"]),
    (["--num-processes", "99999999999"], ["launch.num_processes", "65536"]),
    (["training.learning_rate=.inf"], ["training.learning_rate", "not a finite number"]),
    (["training.seed=-1"], ["training.seed", ">= 0"]),
    (["training.seed=4294967296"], ["training.seed", "<= 4294967295"]),
    (["data.seed=-1"], ["data.seed"]),
    (["eval.seed=-1"], ["eval.seed"]),
    (["output.dir=''"], ["output.dir", "is empty"]),
])
def test_values_that_broke_training_are_refused_by_validate(args, needles) -> None:
    _paragraph(run_cli("validate", DEMO, *args), *needles)


def test_an_infinite_gradient_norm_still_means_no_clipping() -> None:
    assert run_cli("validate", DEMO, "training.max_grad_norm=.inf").exit_code == 0


def test_omp_num_threads_too_large_for_torch_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "5000000000")
    monkeypatch.delenv("GRPO_CHOSEN_THREADS", raising=False)
    _paragraph(run_cli("validate", DEMO), "OMP_NUM_THREADS=5000000000", "at most 4096")


def test_train_refuses_an_empty_or_unwritable_output_dir_before_loading(tmp_path: Path) -> None:
    _paragraph(run_cli("train", DEMO, *FAST, "-o", ""), "--output-dir", "is empty")
    (tmp_path / "afile").write_text("x")
    _paragraph(run_cli("train", DEMO, *FAST, "-o", tmp_path / "afile" / "run"), "--output-dir",
               "cannot write the run directory")
    assert (tmp_path / "afile").read_text() == "x"


def test_eval_outputs_are_probed_before_any_model_loads(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    under = tmp_path / "afile" / "eval"
    _paragraph(run_cli("eval", DEMO, "--model", "bundled:tiny-arith", "--out", under, "-n", "1"), "--out",
               "cannot write to")
    _paragraph(run_cli("eval", "--suite", "svamp", "--model", "bundled:tiny-arith", "--out", under, "-n", "1"),
               "--out", "cannot write to")
    _paragraph(run_cli("eval", "--suite", "svamp", "--model", "bundled:tiny-arith", "--out", tmp_path / "afile",
                       "-n", "1"), "exists and is a file")


# ---------------------------------------------------------------------------- run-directory readers and writers


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("round4") / "run"
    result = run_cli("train", DEMO, *FAST, "model.lora.r=4", "model.lora.alpha=8", "-o", out)
    assert result.exit_code == 0, result
    return out


def test_report_out_never_replaces_a_users_file(lora_run: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("my recipe\n")
    _paragraph(run_cli("report", lora_run, "--out", recipe), "does not end in .png or .md")
    assert recipe.read_text() == "my recipe\n"
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    _paragraph(run_cli("report", lora_run, "--out", notes), "already exists", "--force")
    assert notes.read_text() == "my notes\n" and not (tmp_path / "notes.png").exists()
    assert run_cli("report", lora_run, "--out", notes, "--force").exit_code == 0
    assert notes.read_text().startswith("# Run report") and (tmp_path / "notes.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_report_and_samples_name_a_directory_where_a_file_belongs(lora_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    (run / "report.md").unlink()
    (run / "report.md").mkdir()
    _paragraph(run_cli("report", run), "report.md is a directory")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()
    _paragraph(run_cli("report", run), "metrics.jsonl is a directory")
    (run / "completions.jsonl").unlink()
    (run / "completions.jsonl").mkdir()
    _paragraph(run_cli("samples", run), "completions.jsonl is a directory")
    _paragraph(run_cli("samples", DEMO), "is a file, not a run directory")


def test_push_dry_run_keeps_a_card_grpo_did_not_write(lora_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    (run / "README.md").write_text("MY OWN CARD\n")
    _paragraph(run_cli("push", run, "me/model", "--dry-run"), "not a model card grpo wrote", "--force")
    assert (run / "README.md").read_text() == "MY OWN CARD\n"
    assert run_cli("push", run, "me/model", "--dry-run", "--force").exit_code == 0
    assert "through grpo-cli" in (run / "README.md").read_text()
    assert run_cli("push", run, "me/model", "--dry-run").exit_code == 0  # grpo's own card is rewritten freely


def test_merge_into_a_place_that_cannot_be_written_fails_before_loading(lora_run: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    _paragraph(run_cli("merge", lora_run, "--out", tmp_path / "afile" / "merged"), "--out", "afile")
    assert (tmp_path / "afile").read_text() == "x"


# ---------------------------------------------------------------------------- paths that reach YAML or a shell


def test_printed_commands_quote_the_paths_they_name(tmp_path: Path) -> None:
    script = ROOT / "tests" / "fixtures" / "imports" / "trl" / "train_grpo.py"
    recipe = tmp_path / "my $(touch PWNED).yaml"
    result = run_cli("import", "trl", script, "-o", recipe)
    assert result.exit_code == 0, result
    assert f"grpo validate '{recipe}'" in " ".join(result.output.split())
    job = tmp_path / "$(touch PWNED).sbatch"
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "--gpus-per-node", "2", "-o", job)
    assert result.exit_code == 0, result
    assert f"sbatch '{job}'" in " ".join(result.output.split())


def test_import_refuses_paths_with_line_breaks(tmp_path: Path) -> None:
    script = ROOT / "tests" / "fixtures" / "imports" / "trl" / "train_grpo.py"
    _paragraph(run_cli("import", "trl", script, "-o", tmp_path / "bad\nname.yaml"), "-o", "line break")
    odd = tmp_path / "sc\nript.py"
    shutil.copy(script, odd)
    _paragraph(run_cli("import", "trl", odd, "-o", tmp_path / "r.yaml"), "CONFIG", "line break")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sc\nript.py"]


def test_cpus_per_task_beyond_any_node_is_refused(tmp_path: Path) -> None:
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "--gpus-per-node", "2", "--cpus-per-task",
                     "99999999999", "-o", tmp_path / "j.sbatch")
    assert result.exit_code == 2 and not (tmp_path / "j.sbatch").exists(), result


# ---------------------------------------------------------------------------- the GPU kit's scripts


def _script(name: str, *args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHON": sys.executable})


def test_gpu_check_refuses_bad_outdirs_before_running_anything(tmp_path: Path) -> None:
    done = _script("gpu_check.sh", "--help")
    assert done.returncode == 0 and "usage:" in done.stdout
    assert not Path("--help").exists()
    done = _script("gpu_check.sh", "--dry-run", "-x")
    assert done.returncode == 2 and "unknown option -x" in done.stderr
    (tmp_path / "afile").write_text("x")
    done = _script("gpu_check.sh", "--dry-run", tmp_path / "afile")
    assert done.returncode == 2 and "is not a directory" in done.stderr
    assert (tmp_path / "afile").read_text() == "x"
    if Path("/proc").is_dir():  # a directory nobody can create files in, even root
        done = _script("gpu_check.sh", "--dry-run", "/proc")
        assert done.returncode == 2 and "cannot write into OUTDIR" in done.stderr, done.stderr


def test_gpu_wheels_never_deletes_a_wheel_it_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "mine-1.0-py3-none-any.whl"
    mine.write_text("my wheel")
    done = _script("gpu_wheels.sh", tmp_path)
    assert done.returncode == 2 and "did not write" in done.stderr, done.stderr
    assert mine.read_text() == "my wheel"
    done = _script("gpu_wheels.sh", mine)
    assert done.returncode == 2 and "is not a directory" in done.stderr


def test_an_empty_repo_id_and_a_data_directory_are_named_as_such(lora_run: Path, tmp_path: Path) -> None:
    _paragraph(run_cli("push", lora_run, "", "--dry-run"), "REPO_ID", "the repository id is empty")
    (tmp_path / "rows").mkdir()
    _paragraph(run_cli("validate", DEMO, f"data.files.train={tmp_path / 'rows'}"), "for a directory of files",
               "rows/train.jsonl")


def test_the_new_surfaces_refuse_what_would_fail_later(tmp_path: Path) -> None:
    """The lead's pass over what landed after the sweep (`sampling:`, `grpo export`): an infinite `min_std` drops
    every group (nothing would learn); an --out nobody can write is refused before the conversion, not by a
    traceback at its final rename; a directory as --out is named."""
    _paragraph(run_cli("validate", RECIPES / "demo.yaml", "sampling.dynamic.min_std=.inf"), "min_std", "finite")
    model = ROOT / "grpo_cli" / "assets" / "tiny-arith"
    _paragraph(run_cli("export", model, "--gguf", "--out", "/proc/x.gguf"), "--out", "cannot write")
    _paragraph(run_cli("export", model, "--gguf", "--out", tmp_path), "--out", "is a directory")
    assert list(tmp_path.iterdir()) == [] and not list(model.glob("*.gguf"))
