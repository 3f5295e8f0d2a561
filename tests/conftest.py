"""Shared test helpers: run the CLI in-process and write recipes into temp dirs."""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
# One quick training step: 2 prompts x 4 generations, a log line for it, no before/after evaluation.
ONE_STEP = ["training.max_steps=1", "training.per_device_train_batch_size=8", "training.num_generations=4",
            "training.logging_steps=1", "eval.before_after=false"]

# Keep torch single-threaded-ish and quiet in tests on small CI machines.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# The runs of the suite measure rates too: they go to a file of the session's own, not this machine's file
# (grpo_cli/step_rates.py), so neither changes the other's time plans.
os.environ.setdefault("GRPO_RATES_FILE", os.path.join(tempfile.mkdtemp(prefix="grpo-rates-"), "rates.json"))


class CliResult:
    def __init__(self, exit_code: int, output: str) -> None:
        self.exit_code = exit_code
        self.output = output

    def __repr__(self) -> str:
        return f"<exit {self.exit_code}>\n{self.output}"


def health_events(out: Path) -> list[dict]:
    """The guard events a run wrote to OUTPUT_DIR/health.jsonl ([] when none fired)."""
    path = out / "health.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def sigint_as_a_terminal() -> None:
    """`preexec_fn` for a child a test interrupts: SIGINT handled as a terminal delivers it. A shell that starts
    pytest in the background ignores SIGINT, and a child Python keeps an ignored SIGINT (Ctrl-C would do nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """This process's SIGINT as Python sets it up at a terminal (KeyboardInterrupt), for the test's duration: a
    shell that starts pytest in the background (`nohup`, `&`) has it ignored, and a test of what grpo does on
    Ctrl-C must not depend on how the suite was started."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_cli(*args: str | Path) -> CliResult:
    """Run `grpo ARGS` in-process; output holds stdout and stderr together."""
    from grpo_cli.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    out = result.output
    try:
        if result.stderr and result.stderr not in out:
            out += result.stderr
    except ValueError:
        pass
    return CliResult(result.exit_code, out)


def assert_paragraph(result: CliResult, *needles: str) -> str:
    """A refusal as grpo promises it: exit 2, no traceback, one paragraph (an `error:` line, wrapped or not, with
    nothing after it) holding every needle (whitespace-insensitive): the file and line it starts with count too.
    Returns the paragraph, flattened."""
    assert result.exit_code == 2, result
    assert "Traceback" not in result.output, result
    starts = [m.start() for m in re.finditer(r"^error:", result.output, re.MULTILINE)]  # the line grpo starts it with
    assert starts, result
    paragraph = result.output[starts[-1]:]  # the last: run_cli may repeat stderr after the interleaved output
    assert "\n\n" not in paragraph.strip(), result
    flat = " ".join(paragraph.split())
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{result.output}"
    return flat


def plan_text(output: str) -> str:
    """`grpo validate`'s output with the plan table's borders gone, so a value wrapped over rows reads as one line."""
    return " ".join(re.sub("[\u2500-\u257f]", " ", output).split())


def not_regular_files(root: Path, name: str) -> list[Path]:
    """Two run directories under `root` where `name` is no file on disk: a link to /dev/urandom (endless) and a
    named pipe (blocks forever when opened). Returns the directories."""
    dirs = [root / "urandom", root / "fifo"]
    for d in dirs:
        d.mkdir()
    (dirs[0] / name).symlink_to("/dev/urandom")
    os.mkfifo(dirs[1] / name)
    return dirs


@pytest.fixture
def write_recipe(tmp_path: Path):
    """Write a YAML text (dedented) to tmp_path/name and return its path."""

    def write(text: str, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path

    return write


MINIMAL = """
model:
  name_or_path: Qwen/Qwen2.5-0.5B-Instruct
data:
  files: data.jsonl
  prompt: {column: question}
rewards:
  - name: accuracy
training:
  num_generations: 4
  per_device_train_batch_size: 4
"""


@pytest.fixture
def minimal_dir(tmp_path: Path) -> Path:
    """A directory with a tiny jsonl dataset (question, answer) beside where recipes are written."""
    rows = [f'{{"question": "What is {i}+{i}?", "answer": "#### {2 * i}"}}' for i in range(12)]
    (tmp_path / "data.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """A copy of the demo recipe with its data beside it (data/train.jsonl, data/test.jsonl); returns the recipe."""
    data = ROOT / "grpo_cli" / "assets" / "tiny-arith-data"
    (tmp_path / "data").mkdir()
    for name in ("train.jsonl", "test.jsonl"):
        (tmp_path / "data" / name).write_bytes((data / name).read_bytes())
    text = (RECIPES / "demo.yaml").read_text(encoding="utf-8").replace("bundled:tiny-arith-data/", "data/")
    (tmp_path / "demo.yaml").write_text(text, encoding="utf-8")
    return tmp_path / "demo.yaml"
