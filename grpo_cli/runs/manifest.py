"""The run manifest (manifest.json): what ran, on what, with which versions, how it ended and what it scored.

One typed model, read and written only here, so every reader (the report, report.png, the model card,
`grpo train`'s own bookkeeping, the launcher) names its fields instead of string keys. The file carries
`version`. A manifest written before that field existed reads as version 0, and a key an older grpo did
not write reads as missing (None or empty), so every run directory grpo ever wrote still reads. A key
this version does not know is kept and written back; a value of the wrong type (a hand-edited file) reads
as missing rather than failing the command that reads it. Only what was set is written, so a manifest
read and written back keeps its shape. The file's name and place are `runs.MANIFEST`.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from grpo_cli.step_rates import RateRow, TimePlan

MANIFEST_VERSION = 1
"""1: the first versioned manifest (the fields below). 0: written before manifests had a version."""

PACKAGES = ("grpo-cli", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers",
            "vllm", "deepspeed", "bitsandbytes", "math-verify")


class _Part(BaseModel):
    """A part of manifest.json with fixed fields (built on first use: importing grpo stays cheap)."""

    model_config = ConfigDict(defer_build=True)


class _Record(_Part):
    """A part of manifest.json that keeps the keys it does not name (a newer grpo's, a tool's own summary), so
    a manifest read and written back loses nothing."""

    model_config = ConfigDict(extra="allow")


class GitState(_Part):
    """The git checkout holding the recipe, when there is one."""

    commit: str
    dirty: bool


class Hardware(_Record):
    """What the run ran on (the torch entries only where torch is installed)."""

    platform: str | None = None
    cpu_count: int | None = None
    cuda: bool | None = None
    gpus: list[str] | None = None
    torch_threads: int | None = None


class Best(_Part):
    """The model kept in best/ for the task metric (eval.every_steps); also best/grpo_best.json."""

    step: int
    metric: str
    value: float
    path: str


class ToolUse(_Record):
    """One tool's calls over the run (`tools.ToolStats.summary`)."""

    calls: int | None = None
    failures: int | None = None
    timeouts: int | None = None
    results_cut: int | None = None
    mean_seconds: float | None = None
    last_error: str | None = None


class AsyncRun(_Record):
    """`launch.vllm.mode: async`: which trainer ran, its staleness bound and importance-sampling correction."""

    trainer: str | None = None
    max_staleness: int | None = None
    correction: str | None = None
    weight_sync: str | None = None
    """grpo-cpu (grpo's CPU weight sync) or nccl (TRL's own)."""


class Scores(RootModel[dict[str, Any]]):
    """Held-out scores (`eval_before`, `eval_after`): metric -> value in the order the evaluation wrote them,
    the scoring's own summary (a recipe's rewards or a suite's accuracy), so its keys are data, not fields."""

    model_config = ConfigDict(defer_build=True)

    def items(self) -> list[tuple[str, Any]]:
        """(metric, value) in the order the evaluation wrote them."""
        return list(self.root.items())

    def value(self, metric: str) -> Any:
        """The value of `metric` (None when this evaluation did not score it)."""
        return self.root.get(metric)

    @property
    def prompts(self) -> int | None:
        """How many prompts were scored (a recipe's eval split; a suite says `problems`)."""
        return _whole(self.value("prompts"))

    @property
    def k(self) -> int | None:
        """Completions sampled per prompt."""
        return _whole(self.value("k"))


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Manifest(_Record):
    """Everything manifest.json says about a run; every field may be missing in an older (or a failed) run's."""

    model_config = ConfigDict(populate_by_name=True)
    version: int = 0
    """MANIFEST_VERSION in what grpo writes now; 0 in a file without the field (written before it existed)."""
    status: str | None = None
    """running, completed, stopped, interrupted, failed or killed."""
    started: str | None = None
    finished: str | None = None
    command: list[str] | None = None
    recipe: str | None = None
    seed: int | None = None
    world_size: int | None = None
    git: GitState | None = None
    versions: dict[str, str] | None = None
    hardware: Hardware | None = None
    output_dir: str | None = None
    resumed_from: str | None = None
    data: dict[str, Any] | None = None
    """The data's counts (rows loaded, filtered, dropped), as `data.prepare_data` reported them."""
    dtype: str | None = None
    device: str | None = None
    threads: str | None = None
    distributed: dict[str, Any] | None = None
    """What each process held (`training.sharding.gather_layout`)."""
    tools: dict[str, ToolUse] | None = None
    global_step: int | None = None
    message: str | None = None
    eval_before: Scores | None = None
    eval_after: Scores | None = None
    best: Best | None = None
    async_run: AsyncRun | None = Field(default=None, alias="async")
    """Written as `async` (a Python keyword)."""
    time_plan: TimePlan | None = None
    """The time plan the run started with (`grpo validate`'s, for the threads the run chose)."""
    step_rates: RateRow | None = None
    """The steady step the run measured, per part: checked against `time_plan`, remembered for the next plan."""

    def held_out(self) -> list[tuple[str, Any, Any]]:
        """(metric, before, after) for each score recorded before training, in order ([] without one)."""
        if self.eval_before is None:
            return []
        after = self.eval_after or Scores({})
        return [(key, value, after.value(key)) for key, value in self.eval_before.items()]

    def package_version(self, name: str) -> str | None:
        """The installed version of `name` the run recorded (None when it did not)."""
        return (self.versions or {}).get(name)

    def end(self, status: str, global_step: int | None, message: str) -> None:
        """Record how the run ended, now."""
        self.status, self.finished, self.global_step, self.message = status, now(), global_step, message

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Manifest:
        """A manifest from its JSON object; a value of the wrong type reads as missing."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
            return cls.model_validate({k: v for k, v in data.items() if k not in bad})

    @classmethod
    def read(cls, path: Path) -> Manifest | None:
        """The manifest in the file `path` (None when missing, damaged, or not a JSON object with keys)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return cls.parse(data) if isinstance(data, dict) and data else None

    def write(self, path: Path) -> None:
        """Write atomically, so an interrupted run never leaves a truncated manifest."""
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.model_dump(exclude_unset=True, by_alias=True), indent=2, default=str) + "\n",
                       encoding="utf-8")
        tmp.replace(path)


def read_best(path: Path) -> Best | None:
    """best/grpo_best.json (None when missing, damaged or incomplete)."""
    try:
        return Best.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def write_best(path: Path, best: Best) -> None:
    """best/grpo_best.json: what best/ was kept for, beside the model."""
    path.write_text(json.dumps(best.model_dump()) + "\n", encoding="utf-8")


def package_versions() -> dict[str, str]:
    """Versions of the packages that decide what a run does."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def git_state(where: Path) -> GitState | None:
    """Commit and dirtiness of the git checkout holding `where`, if any."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=where, capture_output=True, text=True,
                               timeout=5, check=True).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        return None
    return GitState(commit=commit, dirty=dirty)


def hardware() -> Hardware:
    """What the run runs on (torch is imported only if already installed)."""
    info: dict[str, Any] = {"platform": platform.platform(), "cpu_count": os.cpu_count()}
    try:
        import torch

        info["cuda"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return Hardware(**info)


def now() -> str:
    """UTC timestamp for the manifest."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def start_manifest(recipe_source: str, seed: int, world_size: int) -> Manifest:
    """The manifest of a run that is starting: what, where, with which versions."""
    where = Path(recipe_source).resolve().parent if recipe_source else Path.cwd()
    return Manifest(version=MANIFEST_VERSION, status="running", started=now(), finished=None,
                    command=[Path(sys.argv[0]).name, *sys.argv[1:]], recipe=recipe_source, seed=seed,
                    world_size=world_size, git=git_state(where), versions=package_versions(), hardware=hardware())
