"""The run-directory contract: what `grpo train` writes where, and the rules for reusing a directory.

Every other module names run files through the constants here, so the layout is stated once:

    OUTPUT_DIR/
      recipe.yaml      the resolved recipe          manifest.json   versions, command, status, results
      metrics.jsonl    one record per log          health.jsonl    health guard events
      report.png/.md   `grpo report`                checkpoint-N/   transformers checkpoints (TRL's naming)
      model/adapter files and the tokenizer, once the run completes
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError

RECIPE = "recipe.yaml"
MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"
HEALTH = "health.jsonl"
REPORT_IMAGE = "report.png"
REPORT_SUMMARY = "report.md"
CHECKPOINT_PREFIX = "checkpoint-"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")

PACKAGES = ("grpo-cli", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers",
            "vllm", "deepspeed", "bitsandbytes", "math-verify")


def package_versions() -> dict[str, str]:
    """Versions of the packages that decide what a run does, for the manifest."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def git_state(where: Path) -> dict[str, Any] | None:
    """Commit and dirtiness of the git checkout holding `where`, if any."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=where, capture_output=True, text=True,
                               timeout=5, check=True).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def hardware() -> dict[str, Any]:
    """What the run ran on (torch is imported only if already installed)."""
    info: dict[str, Any] = {"platform": platform.platform(), "cpu_count": os.cpu_count()}
    try:
        import torch

        info["cuda"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def now() -> str:
    """UTC timestamp for the manifest."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Write atomically, so an interrupted run never leaves a truncated manifest."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def start_manifest(recipe_source: str, seed: int, world_size: int) -> dict[str, Any]:
    """The manifest of a run that is starting: what, where, with which versions."""
    where = Path(recipe_source).resolve().parent if recipe_source else Path.cwd()
    return {
        "status": "running",
        "started": now(),
        "finished": None,
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "recipe": recipe_source,
        "seed": seed,
        "world_size": world_size,
        "git": git_state(where),
        "versions": package_versions(),
        "hardware": hardware(),
    }


def read_manifest(out: Path) -> dict[str, Any]:
    """The manifest of the run in `out` ({} when missing or damaged)."""
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def checkpoint_step(path: Path) -> int | None:
    """N for a `checkpoint-N` path, else None."""
    match = _CHECKPOINT.match(path.name)
    return int(match.group(1)) if match else None


def latest_checkpoint(out: Path) -> Path | None:
    """The checkpoint-N directory with the highest N, if any."""
    steps = [(checkpoint_step(c), c) for c in out.iterdir()] if out.is_dir() else []
    found = [(s, c) for s, c in steps if s is not None and c.is_dir()]
    return max(found)[1] if found else None


def is_run_dir(out: Path) -> bool:
    """Whether `out` holds (part of) a grpo training run."""
    return any((out / n).exists() for n in (MANIFEST, RECIPE, METRICS)) or latest_checkpoint(out) is not None


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
            if not is_run_dir(out):
                raise GrpoError(f"{out} is not empty and does not look like a grpo run (no manifest.json, "
                                "recipe.yaml, metrics.jsonl or checkpoint); refusing to delete it", where="--force",
                                fix="Choose an empty or new --output-dir.")
            return None, True
        else:
            raise GrpoError(f"output directory {out} is not empty; refusing to overwrite a previous run",
                            where="output.dir",
                            fix="Use --resume to continue it, --force to replace it, or --output-dir for a new one.")
    return None, False


def check_resume_compatible(recipe: Any, out: Path) -> None:
    """Refuse to resume a run with a recipe that cannot load its checkpoint (model or LoRA changed)."""
    import yaml

    saved_path = out / RECIPE
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
