"""The GPU proof kit (scripts/gpu_check.sh, scripts/gpu_wheels.sh) on the CPU, so it cannot rot between GPU runs.

The dry run is the same script and the same parts as on a GPU, with tiny sizes: it trains the demo, trains two
random models under the memory probe, merges a LoRA adapter and writes the tables. The wheels are downloaded
for Python 3.12 (the GPU image's), installed without an index into a scratch folder and imported by a real
Python 3.12, which then validates a recipe through the carried pydantic.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "gpu_check.sh"
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
        assert case["status"] == "completed" and case["steps"] >= 2
        assert case["plan"]["total"] > 0 and case["measured"]["peak"] > 0
        assert case["measured"]["generate_seconds"], "the probe saw no generate call"
        assert case["throughput"]["completion_tokens"] == case["completion_length"]  # lengths were fixed
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    for name in _parts():
        assert f"| {name} | ok |" in table
    assert "(dry run, CPU)" in table


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
