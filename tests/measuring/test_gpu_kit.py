"""The GPU proof kit (scripts/gpu_check.sh, scripts/gpu_wheels.sh) on the CPU, so it cannot rot between GPU runs.

The dry run is the same script and the same parts as on a GPU, with tiny sizes: it trains the demo, trains two
random models under the memory probe, merges a LoRA adapter and writes the tables. The wheels are downloaded
for Python 3.12 (the GPU image's), installed without an index into a scratch folder and imported by a real
Python 3.12, which then validates a recipe through the carried pydantic.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "gpu_check.sh"
WHEELS = ROOT / "scripts" / "gpu_wheels.sh"
KIT = ROOT / "benchmarks" / "gpu" / "gpu_check.py"
HISTORY = ROOT / "docs" / "performance" / "history"


def _parts() -> list[str]:
    done = subprocess.run([sys.executable, str(KIT), "parts", "--dry-run"],
                          capture_output=True, text=True, check=True)
    return [line.split()[0] for line in done.stdout.splitlines()]


def _dry_run(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CHECK), "--dry-run", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable, **env})


@pytest.mark.slow
def test_the_dry_run_completes_every_part_and_writes_one_json_and_one_table(tmp_path: Path) -> None:
    done = _dry_run(tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert data["dry_run"] is True
    assert set(data["results"]) == set(_parts()), data["results"].keys()
    failed = {k: v.get("error") for k, v in data["results"].items() if not v["ok"]}
    assert not failed, failed
    results = data["results"]
    assert results["facts"]["versions"]["trl"] and "doctor" in results["facts"]
    demo = results["demo-amp"]
    assert demo["status"] == "completed" and demo["after"] > demo["before"], demo  # the demo learns
    cases = [v for k, v in results.items() if k.startswith("case-")]
    assert {c["lora"] for c in cases} == {True, False}
    for case in cases:
        assert case["status"] == case["trl_status"] == "completed" and case["steps"] >= 2
        assert case["plan"]["total"] > 0 and case["measured"]["peak"] > 0
        assert case["measured"]["generate_seconds"], "the probe saw no generate call"
        assert case["throughput"]["completion_tokens"] == case["completion_length"]  # lengths were fixed
        assert case["trl_throughput"]["generation_tokens_per_s"] > 0  # TRL's path measured beside grpo's
        # fp32 on the CPU: grpo's path (merged adapter, static cache) samples exactly TRL's first-round tokens
        assert case["agreement"]["compared"] == 8 and case["agreement"]["same_prompts"], case["agreement"]
        assert case["agreement"]["identical"] == 1.0, case["agreement"]
    lora = next(c for c in cases if c["lora"])
    assert lora["plan_items"]["LoRA merge: kept base copy"] > 0
    assert results["merge"]["source"] == "the case's trained adapter"
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    for name in _parts():
        assert f"| {name} | ok |" in table
    assert "(dry run, CPU)" in table
    assert "| tiny-lora | " in table and "TRL → grpo" in table  # the side-by-side rows
    assert "100%, 100%, 100% of 8" in table


def test_a_spent_time_budget_still_returns_the_whole_table(tmp_path: Path) -> None:
    done = _dry_run(tmp_path / "out", GRPO_GPU_CHECK_SECONDS="16")  # 15 s are kept for the table: no part fits
    assert done.returncode == 0, done.stdout + done.stderr
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    for name in _parts():
        assert f"| {name} | did not finish (time limit or killed) |" in table
    assert "merge skipped: the run's 16 s are spent" in (tmp_path / "out" / "gpu_check.log").read_text()


def test_record_refuses_a_dry_run_and_writes_no_history_file(tmp_path: Path) -> None:
    (tmp_path / "gpu_check.json").write_text(json.dumps({"dry_run": True, "parts": [], "results": {}}))
    (tmp_path / "gpu_check.md").write_text("### GPU check (dry run, CPU)\n")
    page, history = (ROOT / "docs" / "performance.md").read_text(), sorted(HISTORY.glob("*"))
    done = subprocess.run([sys.executable, str(KIT), "record", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode != 0 and "nothing recorded" in done.stderr
    assert (ROOT / "docs" / "performance.md").read_text() == page and sorted(HISTORY.glob("*")) == history


def _python312() -> str | None:
    for exe in ["python3.12", *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]:
        try:
            done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.startswith("Python 3.12"):
            return exe
    return None


@pytest.mark.slow
def test_the_wheels_install_offline_for_python_312_and_grpo_validates_with_them(tmp_path: Path) -> None:
    py312 = _python312()
    if py312 is None:
        pytest.skip("no Python 3.12 on this machine to install the GPU image's wheels into")
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_wheels.sh"), str(wheels)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "of the 64 MiB a device call carries" in done.stdout
    names = sorted(p.name.split("-")[0].lower() for p in wheels.glob("*.whl"))
    assert {"trl", "datasets", "pydantic", "pydantic_core", "omegaconf", "transformers", "peft"} <= set(names)
    install = subprocess.run([py312, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                              "--target", str(site), *map(str, wheels.glob("*.whl"))], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    # What the GPU image has and the kit does not carry (rich, yaml, jinja2) comes from this environment's pure
    # Python packages; the carried ones come first, so pydantic's compiled core must be the cp312 wheel's.
    code = ("import sys; sys.path[:0] = sys.argv[1:]\n"
            "import pydantic_core, typer, omegaconf\n"
            "assert pydantic_core.__file__.startswith(sys.argv[1]), pydantic_core.__file__\n"
            "from grpo_cli import load_recipe, preflight\n"
            "found = preflight(load_recipe(sys.argv[2] + '/recipes/demo.yaml'))\n"
            "assert not found.problems, found.problems\n"
            "print('validated with', pydantic_core.__version__)")
    ran = subprocess.run([py312, "-I", "-c", code, str(site), str(ROOT), sysconfig.get_paths()["purelib"]],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and "validated with" in ran.stdout, ran.stdout + ran.stderr[-3000:]


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2 with one paragraph (one line on stderr) that names what is wrong, no traceback."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("usage:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(("variable", "value"), [("GRPO_GPU_CHECK_SECONDS", "abc"), ("GRPO_GPU_CHECK_SECONDS", "0"),
                                                 ("GRPO_GPU_CHECK_PARTS", "nonsense"),
                                                 ("GRPO_GPU_CHECK_JOBS", "two")])
def test_a_bad_setting_runs_nothing_and_exits_2(tmp_path: Path, variable: str, value: str) -> None:
    done = _dry_run(tmp_path / "out", **{variable: value})
    _refused(done, f"{variable}={value}" if variable != "GRPO_GPU_CHECK_PARTS" else "'nonsense'")
    assert not (tmp_path / "out").exists()


def test_an_unusable_tmpdir_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for tmpdir in (tmp_path / "missing", tmp_path / "file"):
        (tmp_path / "file").write_text("not a directory")
        done = subprocess.run(["bash", str(CHECK), "--dry-run", "out"], capture_output=True, text=True, timeout=60,
                              cwd=cwd, env={**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmpdir)})
        _refused(done, f"TMPDIR={tmpdir}", "writable")
        assert not list(cwd.iterdir()) and not (tmp_path / "missing").exists()


def test_a_dry_run_never_replaces_a_gpu_runs_results(tmp_path: Path) -> None:
    res = tmp_path / "res"
    res.mkdir()
    real = json.dumps({"dry_run": False, "parts": ["facts"], "results": {}})
    (res / "gpu_check.json").write_text(real)
    (res / "gpu_check.md").write_text("### GPU check (H200)\n")
    _refused(_dry_run(res), "GPU run", "new OUTDIR")
    assert (res / "gpu_check.json").read_text() == real
    assert (res / "gpu_check.md").read_text() == "### GPU check (H200)\n"
    assert sorted(p.name for p in res.iterdir()) == ["gpu_check.json", "gpu_check.md"]  # no log written either
    cut = tmp_path / "cut"  # a run that died before its table: its log alone, which cannot be told from a GPU run's
    cut.mkdir()
    (cut / "gpu_check.log").write_text("[gpu_check 3s] facts done\n")
    _refused(_dry_run(cut), "gpu_check.log")
    assert (cut / "gpu_check.log").read_text() == "[gpu_check 3s] facts done\n"


def _wheels(*args: str, cwd: Path, script: Path = WHEELS) -> subprocess.CompletedProcess[str]:
    """gpu_wheels.sh with pip kept off every index, so its download fails at once (no network needed)."""
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHON": sys.executable, "PIP_NO_INDEX": "1"})


def test_gpu_wheels_says_its_usage_and_refuses_extra_arguments(tmp_path: Path) -> None:
    shown = _wheels("--help", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("usage: scripts/gpu_wheels.sh [DIR]")
    _refused(_wheels("a", "b", cwd=tmp_path), "one DIR at most", "(a b)")
    _refused(_wheels("--bogus", cwd=tmp_path), "unknown option --bogus")
    assert not list(tmp_path.iterdir())  # no directory named --help, a, b or --bogus


def _listed(folder: Path, *names: str) -> None:
    """What a previous run of gpu_wheels.sh leaves: its wheels, listed with their SHA-256."""
    lines = []
    for name in names:
        (folder / name).write_bytes(b"wheel " + name.encode())
        lines.append(f"{name} {hashlib.sha256((folder / name).read_bytes()).hexdigest()}")
    (folder / ".gpu_wheels").write_text("\n".join(lines) + "\n")


def test_gpu_wheels_deletes_nothing_it_did_not_write_and_nothing_before_a_download_succeeds(tmp_path: Path) -> None:
    listed = tmp_path / "w"  # the list names a file of the user's
    listed.mkdir()
    (listed / "notes.txt").write_text("mine")
    (listed / ".gpu_wheels").write_text("notes.txt\n")
    failed = _wheels(str(listed), cwd=tmp_path)
    assert failed.returncode == 1 and "the download failed" in failed.stderr and "is as it was" in failed.stderr
    assert (listed / "notes.txt").read_text() == "mine"
    own = tmp_path / "own"  # its own wheels from a previous run stay until a new download succeeds
    own.mkdir()
    _listed(own, "trl-1.0-py3-none-any.whl")
    assert _wheels(str(own), cwd=tmp_path).returncode == 1
    assert sorted(p.name for p in own.iterdir()) == [".gpu_wheels", "trl-1.0-py3-none-any.whl"]  # no scratch left
    (own / "trl-1.0-py3-none-any.whl").write_bytes(b"changed by the user")  # no longer what it wrote: not its own
    _refused(_wheels(str(own), cwd=tmp_path), "did not write (or that changed since)", "trl-1.0-py3-none-any.whl")
    root = tmp_path / "checkout"  # the default DIR, .whl in the repository root, holds a wheel the user put there
    (root / "scripts").mkdir(parents=True)
    shutil.copy(WHEELS, root / "scripts" / "gpu_wheels.sh")
    (root / ".whl").mkdir()
    (root / ".whl" / "mine-1.0-py3-none-any.whl").write_text("the user's")
    _refused(_wheels(cwd=tmp_path, script=root / "scripts" / "gpu_wheels.sh"), "mine-1.0-py3-none-any.whl")
    assert (root / ".whl" / "mine-1.0-py3-none-any.whl").read_text() == "the user's"


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
