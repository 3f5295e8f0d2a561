"""`grpo eval`: sample held-out completions for one or more models and score them with the recipe's rewards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, console, say_first
from grpo_cli.suite_table import bundled_text

EVAL_EPILOG = (
    "Models can be hub ids, model dirs, LoRA adapter dirs (base read from adapter_config.json), grpo output "
    "dirs or checkpoint-N dirs. Without --model the recipe's own model is evaluated. Repeat --compare to put "
    "more models side by side; all see the same prompts and seed. Flags override the recipe's `eval` section. "
    f"With --suite (or eval.suite in the recipe) a bundled benchmark is scored instead: {bundled_text()}, "
    "greedy pass@1 with a 95% interval; the recipe may then be omitted and a model or run dir given in its place "
    "(grpo eval --suite gsm8k RUN_DIR). Suite results are written as eval-<suite>.json next to the model."
)


def eval_cmd(
    recipe: Annotated[Path | None, typer.Argument(help="Recipe YAML file; with --suite it may be left out or be "
                                                  "the model/run dir to evaluate.", show_default=False)] = None,
    overrides: OverridesArg = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model to evaluate (default: the recipe's "
                                              "model).", show_default=False)] = None,
    adapter: Annotated[str | None, typer.Option("--adapter", help="LoRA adapter dir applied on top of --model.",
                                                show_default=False)] = None,
    split: Annotated[str | None, typer.Option("--split", help="Evaluate this split instead of the eval split.",
                                              show_default=False)] = None,
    file: Annotated[str | None, typer.Option("--file", help="Evaluate the rows of this .jsonl/.json/.csv/.parquet.",
                                             show_default=False)] = None,
    samples: Annotated[int | None, typer.Option("--samples", "--limit", "-n", min=1, help="At most this many prompts "
                                                "(eval.max_samples).", show_default=False)] = None,
    num_generations: Annotated[int | None, typer.Option("--num-generations", "-k", min=1, help="Samples per "
                                                        "prompt, the k of pass@k (eval.num_generations).",
                                                        show_default=False)] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", "-t", min=0.0, help="Sampling temperature, "
                                                      "0 for greedy (eval.temperature).", show_default=False)] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1, help="Prompts per generate call "
                                                   "(eval.batch_size).", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where completions.jsonl and summary.json go "
                                             "(default: outputs/eval/<time>).", show_default=False)] = None,
    compare: Annotated[list[str] | None, typer.Option("--compare", help="Another model to evaluate side by side "
                                                      "(repeatable).", show_default=False)] = None,
    backend: Annotated[str, typer.Option("--backend", help="auto (vLLM when installed and a GPU is present), "
                                         "transformers or vllm.")] = "auto",
    suite: Annotated[str | None, typer.Option("--suite", help=f"Score a benchmark: {bundled_text(', ')}, or "
                                              "a name in the recipe's eval.suite_files (eval.suite).",
                                              show_default=False)] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", min=1, help="Longest completion "
                                                       "(eval.max_new_tokens).", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an earlier evaluation in --out.")] = False,
) -> None:
    """Sample completions for held-out prompts and score them: the recipe's rewards, or a benchmark suite."""
    what = f"--suite {suite} " if suite else ""
    say_first(f"grpo eval {what}{recipe or model or ''}".rstrip())
    from grpo_cli.cli.render import render_eval_outcome
    from grpo_cli.evaluation import EvalRequest, evaluate

    request = EvalRequest(recipe=recipe, overrides=overrides or [], model=model, adapter=adapter, split=split,
                          file=file, samples=samples, k=num_generations, temperature=temperature,
                          batch_size=batch_size, out=out, compare=compare or [], backend=backend, suite=suite,
                          max_new_tokens=max_new_tokens, force=force)
    render_eval_outcome(console, evaluate(request, console=console))
