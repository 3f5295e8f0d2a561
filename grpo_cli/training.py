"""`grpo train`: build TRL's GRPOTrainer from a recipe and run it.

Order matters: everything that can fail cheaply (preflight, output dir policy) happens
before the model loads, and nothing is written until those checks pass.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.loading import dump_yaml
from grpo_cli.schema import Recipe

SUMMARY_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
                "completions/clipped_ratio", "kl", "entropy", "loss")


@dataclass
class TrainResult:
    """What a run did: where it wrote, how it ended, and what it measured."""

    output_dir: Path
    status: str
    global_step: int
    metrics: list[dict[str, Any]] = field(default_factory=list, repr=False)
    summary: list[tuple[str, float, float]] = field(default_factory=list)
    eval_before: Any = None
    eval_after: Any = None
    data_stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def latest_checkpoint(out: Path) -> Path | None:
    """The checkpoint-N directory with the highest N, if any."""
    best: tuple[int, Path] | None = None
    if out.is_dir():
        for child in out.iterdir():
            name = child.name
            if child.is_dir() and name.startswith("checkpoint-") and name[len("checkpoint-"):].isdigit():
                step = int(name[len("checkpoint-"):])
                if best is None or step > best[0]:
                    best = (step, child)
    return best[1] if best else None


def _looks_like_a_run(out: Path) -> bool:
    return any((out / n).exists() for n in ("manifest.json", "recipe.yaml", "metrics.jsonl")) or \
        latest_checkpoint(out) is not None


def prepare_output_dir(out: Path, *, resume: bool | str | None, force: bool, policy: str) -> tuple[Path | None, bool]:
    """Apply the overwrite policy without touching anything yet.

    Returns (checkpoint to resume from or None, whether the old directory must be replaced).
    The replacement happens only once the model, data and config are ready, so a run that
    fails to start leaves the previous one intact.
    """
    if isinstance(resume, str):
        ckpt = Path(resume)
        if not (ckpt / "trainer_state.json").exists():
            raise GrpoError(f"{ckpt} is not a training checkpoint (no trainer_state.json)", where="--resume",
                            fix="Give a checkpoint-N directory, or `--resume` alone for the latest one "
                                "in the output dir.")
        return ckpt, False
    non_empty = out.exists() and any(out.iterdir())
    if resume or (policy == "resume" and not force):
        ckpt = latest_checkpoint(out)
        if ckpt is None:
            if resume:
                raise GrpoError(f"there is no checkpoint-N directory in {out} to resume from", where="--resume",
                                fix="Drop --resume to start a new run, or point --output-dir at the run to continue.")
            if non_empty:
                raise GrpoError(f"output directory {out} is not empty and holds no checkpoint", where="output.dir",
                                fix="Use --force to replace it, or choose another --output-dir.")
        return ckpt, False
    if non_empty:
        if force or policy == "force":
            if not _looks_like_a_run(out):
                raise GrpoError(f"{out} is not empty and does not look like a grpo run (no manifest.json, "
                                "recipe.yaml, metrics.jsonl or checkpoint); refusing to delete it", where="--force",
                                fix="Choose an empty or new --output-dir.")
            return None, True
        else:
            raise GrpoError(f"output directory {out} is not empty; refusing to overwrite a previous run",
                            where="output.dir",
                            fix="Use --resume to continue it, --force to replace it, or --output-dir for a new one.")
    return None, False


def check_resume_compatible(recipe: Recipe, out: Path) -> None:
    """Refuse to resume a run with a recipe that cannot load its checkpoint (model or LoRA changed)."""
    import yaml

    saved_path = out / "recipe.yaml"
    if not saved_path.exists():
        return
    try:
        saved = yaml.safe_load(saved_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return
    model = saved.get("model") or {}
    if model.get("name_or_path") != recipe.model.name_or_path:
        raise GrpoError(f"the run in {out} trained {model.get('name_or_path')!r}, but this recipe names "
                        f"{recipe.model.name_or_path!r}", where="model.name_or_path",
                        fix="Resume with the recipe saved in the run (its recipe.yaml), or start a new run.")
    if (model.get("lora") is None) != (recipe.model.lora is None):
        had = "with LoRA" if model.get("lora") is not None else "without LoRA (full fine-tune)"
        raise GrpoError(f"the run in {out} was trained {had}; its checkpoint cannot be resumed with "
                        f"model.lora={'set' if recipe.model.lora else 'unset'}", where="model.lora",
                        fix="Resume with the recipe saved in the run (its recipe.yaml), or start a new run.")


def _quiet_libraries() -> None:
    """Hide datasets/transformers progress bars: grpo prints its own progress and summary."""
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def grpo_config_kwargs(recipe: Recipe, out: Path, dtype: str, device: str) -> dict[str, Any]:
    """GRPOConfig keyword arguments: the recipe's training values plus what other sections own."""
    kw = dict(recipe.training.values())
    kw["output_dir"] = str(out)
    trackers = [t for t in recipe.output.report_to if t != "none"]
    kw["report_to"] = trackers or "none"
    kw["reward_weights"] = [float(e.weight) for e in recipe.rewards]
    kw.setdefault("disable_tqdm", True)  # grpo renders its own progress
    if device == "cpu":
        kw["use_cpu"] = True
    if "bf16" not in kw and "fp16" not in kw:
        # TRL defaults to bf16=True, which breaks CPU and pre-Ampere runs: follow the model dtype.
        kw["bf16"] = dtype == "bfloat16" and device != "cpu"
        kw["fp16"] = dtype == "float16" and device != "cpu"
    v = recipe.launch.vllm
    if v.mode != "off":
        kw.update(use_vllm=True, vllm_mode=v.mode, vllm_tensor_parallel_size=v.tensor_parallel_size)
        if v.mode == "colocate":
            kw.update(vllm_gpu_memory_utilization=v.gpu_memory_utilization, vllm_enable_sleep_mode=v.enable_sleep_mode)
        else:
            kw.update(vllm_server_host=v.host, vllm_server_port=v.port, vllm_server_timeout=v.server_timeout)
            if v.base_url:
                kw["vllm_server_base_url"] = v.base_url
        if v.max_model_length:
            kw["vllm_max_model_length"] = v.max_model_length
    return kw


def _summary(records: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Mean of each headline metric over the first and the last logging windows."""
    logs = [r for r in records if "reward" in r]
    if not logs:
        return []
    window = max(1, len(logs) // 5)
    first, last = logs[:window], logs[-window:]
    keys = [k for k in SUMMARY_KEYS if k in logs[-1]]
    keys[1:1] = sorted(k for k in logs[-1] if k.startswith("rewards/") and k.endswith("/mean"))
    rows = []
    for key in keys:
        a = [r[key] for r in first if isinstance(r.get(key), (int, float))]
        b = [r[key] for r in last if isinstance(r.get(key), (int, float))]
        if a and b:
            rows.append((key, sum(a) / len(a), sum(b) / len(b)))
    return rows


def train(recipe: Recipe, *, output_dir: str | Path | None = None, resume: bool | str | None = None,
          force: bool = False, console: Any = None) -> TrainResult:
    """Validate, load, and train; returns when training ends, is stopped, or is interrupted."""
    from grpo_cli.validation import preflight

    preflight(recipe).raise_for_problems()
    out = Path(output_dir or recipe.output.dir)
    ckpt, replace = prepare_output_dir(out, resume=resume, force=force, policy=recipe.output.overwrite)
    if ckpt is not None:
        check_resume_compatible(recipe, out)
    if recipe.launch.vllm.mode == "server" and _is_main_process():
        from grpo_cli.vllm_serve import server_base_url, wait_for_server

        wait_for_server(server_base_url(recipe), recipe.launch.vllm.server_timeout, recipe_source=recipe.source)

    import warnings

    # transformers 5 warns on every run that TRL's `gradient_checkpointing` is an alias; not the user's doing.
    warnings.filterwarnings("ignore", message=".*(gradient_checkpointing|is_gradient_checkpointing).*deprecated",
                            category=FutureWarning)
    from grpo_cli import manifest as mf
    from grpo_cli.callbacks import GracefulStop, MetricsJsonl, RichConsole
    from grpo_cli.data.mapping import prepare_data
    from grpo_cli.modeling import load_model
    from grpo_cli.rewards import build_reward_funcs

    _quiet_libraries()
    if console is not None and _is_main_process():
        steps = recipe.training.get("max_steps")
        console.print(f"[bold]grpo train[/] {recipe.source or 'recipe'}: {recipe.model.name_or_path} -> {out}"
                      + (f", {steps} steps" if isinstance(steps, int) and steps > 0 else ""))
    loaded = load_model(recipe)
    data = prepare_data(recipe, loaded.tokenizer)
    reward_funcs = build_reward_funcs(recipe)
    from grpo_cli.tools import load_toolset

    toolset = load_toolset(recipe)
    main = _is_main_process()

    from trl import GRPOConfig, GRPOTrainer

    try:
        config = GRPOConfig(**grpo_config_kwargs(recipe, out, loaded.dtype, loaded.device))
    except (ValueError, TypeError) as exc:
        raise GrpoError(f"TRL rejected the training settings: {str(exc).splitlines()[0]}", where="training",
                        fix="Fix the named training key; `grpo validate` checks most of these up front.") from None
    if main:
        if replace and out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "recipe.yaml").write_text(dump_yaml(recipe.model_dump(mode="json")), encoding="utf-8")
    manifest = mf.start_manifest(recipe.source, config.seed, recipe.launch.world_size)
    manifest.update(output_dir=str(out), resumed_from=str(ckpt) if ckpt else None, data=data.stats,
                    dtype=loaded.dtype, device=loaded.device)
    if main:
        mf.write_manifest(out / "manifest.json", manifest)

    result = TrainResult(out, "running", 0, data_stats=data.stats)
    if recipe.eval.before_after and data.eval is not None and main and ckpt is None:
        from grpo_cli.evaluation import evaluate_recipe_model

        result.eval_before = evaluate_recipe_model(recipe, loaded.model, loaded.tokenizer, data.eval, console,
                                                   label="before training")
    metrics = MetricsJsonl(out / "metrics.jsonl")
    stopper = GracefulStop()
    callbacks = [metrics, stopper, RichConsole(console, show_kl=float(recipe.training.get("beta") or 0) > 0)]
    from grpo_cli.health import health_callbacks

    callbacks += health_callbacks(recipe, out, console=console)
    trainer = GRPOTrainer(model=loaded.model, reward_funcs=reward_funcs, args=config, train_dataset=data.train,
                          eval_dataset=data.eval if config.eval_strategy != "no" else None,
                          processing_class=loaded.tokenizer, peft_config=loaded.peft_config, callbacks=callbacks,
                          **(toolset.trainer_kwargs() if toolset else {}))
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # grpo prints its own compact line per log
    stopper.install()
    try:
        trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    except BaseException:
        manifest.update(status="failed", finished=mf.now(), global_step=trainer.state.global_step)
        if main:
            mf.write_manifest(out / "manifest.json", manifest)
            from grpo_cli.report import report_after_training

            report_after_training(out, console)
        raise
    finally:
        stopper.uninstall()
        for f in reward_funcs:
            if hasattr(f, "close"):
                f.close()
    result.global_step = trainer.state.global_step
    if toolset is not None:
        manifest.update(tools=toolset.summary())
    result.metrics = metrics.records
    result.summary = _summary(metrics.records)
    stop_reason = next((c.reason for c in callbacks if getattr(c, "reason", None)), "")
    if stopper.received is not None:
        result.status = "interrupted"
        result.message = (f"{stopper.signal_name} received: saved checkpoint-{result.global_step} in {out}; "
                          f"continue with `grpo train {recipe.source or 'RECIPE'} --resume`.")
    elif stop_reason:
        result.status = "stopped"
        result.message = stop_reason
    else:
        result.status = "completed"
        trainer.save_model(str(out))
        if main:
            loaded.tokenizer.save_pretrained(str(out))
        if recipe.eval.before_after and data.eval is not None and main:
            from grpo_cli.evaluation import evaluate_recipe_model

            result.eval_after = evaluate_recipe_model(recipe, trainer.model, loaded.tokenizer, data.eval, console,
                                                      label="after training")
    manifest.update(status=result.status, finished=mf.now(), global_step=result.global_step, message=result.message,
                    eval_before=result.eval_before.summary() if result.eval_before else None,
                    eval_after=result.eval_after.summary() if result.eval_after else None)
    if main:
        mf.write_manifest(out / "manifest.json", manifest)
        from grpo_cli.report import report_after_training

        report_after_training(out, console)
    return result
