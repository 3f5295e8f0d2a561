"""The task metric during training: evaluate every `eval.every_steps`, keep the best checkpoint, stop early.

The training reward can reach 1.0 while the task itself gets worse (a hacked reward, a format the
grader accepts but the task does not). This callback measures what the user cares about, a bundled
suite's accuracy or a reward on the eval split, with batched generation between optimizer steps
(outside TRL's own generation), logs it as `task/<name>` through the trainer's callbacks (so it lands
in metrics.jsonl and the trackers), copies the model to OUTPUT_DIR/best whenever it improves and
records that in manifest.json. Only the main process generates; the verdict is broadcast so every
process saves and stops together.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.evaluation.task import EvalTask, evaluate_loaded
from grpo_cli.runs.manifest import Best, Manifest, read_best, write_best
from grpo_cli.training.callbacks import TrainerBound
from grpo_cli.training.completions import COMPLETIONS_FILE, CompletionsLog
from grpo_cli.training.suite_on_save import SuitesOnSave

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe

BEST_DIR = runs.BEST
BEST_RECORD = runs.BEST_RECORD
"""Inside best/: step, metric and value of the model there, so a resumed run only replaces it by a better one."""


def metric_name(recipe: Recipe) -> str:
    """The logged key: task/<suite>/<metric> or task/eval/<metric>."""
    return f"task/{recipe.eval.suite or 'eval'}/{recipe.eval.metric}"


def build_evaluator(recipe: Recipe, tokenizer: Any, eval_rows: Any) -> Callable[[Any], float | None]:
    """model -> the task metric, with the recipe's eval settings (a suite decodes greedily by default)."""
    ev, task = recipe.eval, EvalTask.for_recipe(recipe)

    def measure(model: Any) -> float | None:
        result = evaluate_loaded(task, model, tokenizer, eval_rows)
        if task.suite is not None:
            return result.accuracy
        if ev.metric == "accuracy":
            return result.pass_at(1)
        if ev.metric == "reward":
            totals = result.total()
            return sum(totals) / len(totals) if totals else None
        return result.mean(ev.metric)

    return measure


def _broadcast(value: Any) -> Any:
    """The main process's value on every process (a no-op without torch.distributed)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class TaskMetric(TrainerBound):
    """Evaluate on a cadence (and once before training), keep best/, early-stop on a plateau.

    Set `trainer` after building the GRPOTrainer: logging and saving go through it.
    """

    def __init__(self, recipe: Recipe, evaluate: Callable[[Any], float | None], out: Path,
                 manifest: Manifest, write_manifest: Callable[[], None], console: Console | None = None) -> None:
        ev = recipe.eval
        self.name = metric_name(recipe)
        self.every = int(ev.every_steps or 0)  # only built when eval.every_steps is set
        self.patience = ev.early_stopping_patience
        self.sign = 1.0 if ev.greater_is_better else -1.0
        self.evaluate = evaluate
        self.out = out
        self.manifest = manifest
        self.write_manifest = write_manifest
        self.console = console
        self.history: list[tuple[int, float | None]] = []
        self.best: tuple[int, float] | None = self._previous_best()
        self.stale = 0
        self.early_stop_message = ""

    def _previous_best(self) -> tuple[int, float] | None:
        """The best of this run before a resume (best/grpo_best.json), when it measured the same metric."""
        record = read_best(self.out / BEST_DIR / BEST_RECORD)
        if record is None or record.metric != self.name:
            return None
        self.manifest.best = record
        return record.step, record.value

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == 0:  # the baseline; not a checkpoint, so never best/
            self._measure(args, state, control, keep=False)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
        step = state.global_step
        if step > 0 and (step % self.every == 0 or step == state.max_steps):
            self._measure(args, state, control, keep=True)
        return control

    def _measure(self, args: Any, state: Any, control: Any, *, keep: bool) -> None:
        main = state.is_world_process_zero
        value = self.evaluate(self.trainer.model) if main else None
        value = _broadcast(value)
        value = value if isinstance(value, (int, float)) and math.isfinite(value) else None
        step = state.global_step
        self.history.append((step, value))
        record = {self.name: value}
        state.log_history.append({**record, "step": step})
        pending = control.should_log  # the handler clears it: keep this step's training log
        self.trainer.callback_handler.on_log(args, state, control, logs=record)
        control.should_log = pending
        if main and self.console is not None:
            shown = "-" if value is None else f"{value:.4f}"
            self.console.print(f"step {step:>5}  {self.name} {shown}", markup=False)
        if not keep or value is None:
            return
        if self.best is None or self.sign * (value - self.best[1]) > 0:
            self.best, self.stale = (step, value), 0
            self._save_best(step, value, main)
        else:
            self.stale += 1
            if self.patience and self.stale >= self.patience:
                control.should_training_stop = True
                self.early_stop_message = (f"early stop: {self.name} has not improved for {self.stale} evaluations "
                                           f"(best {self.best[1]:.4f} at step {self.best[0]}, kept in {BEST_DIR}/)")

    def _save_best(self, step: int, value: float, main: bool) -> None:
        """Replace OUTPUT_DIR/best with the current model and record it in the manifest."""
        best, tmp = self.out / BEST_DIR, self.out / f".{BEST_DIR}.tmp"
        if main and tmp.exists():
            shutil.rmtree(tmp)
        self.trainer.save_model(str(tmp))  # every process: sharded models need all of them
        if not main:
            return
        tokenizer = getattr(self.trainer, "processing_class", None)
        if tokenizer is not None and not (tmp / "tokenizer_config.json").exists():
            tokenizer.save_pretrained(str(tmp))
        record = Best(step=step, metric=self.name, value=value, path=BEST_DIR)
        write_best(tmp / BEST_RECORD, record)
        old = self.out / f".{BEST_DIR}.old"
        if old.exists():
            shutil.rmtree(old)
        if best.exists():  # set the previous best aside first: a crash between the renames loses neither
            best.replace(old)
        tmp.replace(best)
        shutil.rmtree(old, ignore_errors=True)
        self.manifest.best = record
        self.write_manifest()


def run_callbacks(recipe: Recipe, out: Path, manifest: Manifest, tokenizer: Any, eval_rows: Any,
                  console: Console | None = None) -> list[TrainerBound]:
    """The callbacks this issue's outputs need: completions.jsonl, and the task metric when eval.every_steps."""
    extras: list[TrainerBound] = []
    if recipe.output.completions_per_log:
        seed = recipe.training.seed
        import string

        prompt = recipe.data.prompt
        template = string.Formatter().parse(prompt.template or "")
        shown = {prompt.column} if prompt.column else {f for _, f, _, _ in template if f}
        extras.append(CompletionsLog(out / COMPLETIONS_FILE, per_step=recipe.output.completions_per_log, seed=seed,
                                     prompt_columns=shown))
    if recipe.eval.on_save:
        extras.append(SuitesOnSave(recipe, tokenizer, console))
    if recipe.eval.every_steps:
        evaluate = build_evaluator(recipe, tokenizer, eval_rows)
        extras.append(TaskMetric(recipe, evaluate, out, manifest,
                                 lambda: runs.write_manifest(out, manifest), console))
    return extras
