"""`eval.on_save`: each saved checkpoint evaluated on named benchmark suites, as open-r1 does after each push.

The live model at `on_save` is the checkpoint just written, so nothing is loaded again. Results go to the
logs (`suite/<name>/accuracy`) and to CHECKPOINT/suites.json, so every checkpoint carries its own scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.evaluation.scoring import EvalSettings
from grpo_cli.evaluation.suites import get_suite, recipe_suite_files
from grpo_cli.evaluation.task import EvalTask, evaluate_loaded
from grpo_cli.training.callbacks import TrainerBound

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe

SUITES_FILE = "suites.json"


class SuitesOnSave(TrainerBound):
    """Evaluate the model on the recipe's `eval.on_save` suites at every save (main process)."""

    def __init__(self, recipe: Recipe, tokenizer: Any, console: Console | None = None) -> None:
        files, settings = recipe_suite_files(recipe), EvalSettings.resolve(recipe, suite=True)
        self.tasks = [EvalTask(settings, get_suite(name, where="eval.on_save", files=files), recipe)
                      for name in recipe.eval.on_save]
        self.tokenizer = tokenizer
        self.console = console

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if not state.is_world_process_zero or model is None:
            return

        scores: dict[str, Any] = {}
        was_training = model.training
        model.eval()
        for task in self.tasks:
            scores[task.name] = evaluate_loaded(task, model, self.tokenizer, None,
                                                label=f"step {state.global_step}").summary()
        if was_training:
            model.train()
        checkpoint = Path(args.output_dir) / f"{runs.CHECKPOINT_PREFIX}{state.global_step}"
        if checkpoint.is_dir():
            (checkpoint / SUITES_FILE).write_text(json.dumps({"step": state.global_step, "suites": scores},
                                                             indent=2), encoding="utf-8")
        metrics = {f"suite/{name}/accuracy": s["accuracy"] for name, s in scores.items()}
        if self.console is not None:
            shown = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())
            self.console.print(f"{checkpoint.name}: {shown}", markup=False)
        if self.trainer is not None:
            self.trainer.log(metrics)  # metrics.jsonl and the trackers, at this step
        else:
            state.log_history.append({**metrics, "step": state.global_step})
