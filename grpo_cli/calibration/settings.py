"""What `grpo calibrate` was asked, checked before a model loads, and the settings a resumed run must share.

The reward, the range and the output directory are refused here with one paragraph each (exit 2); the sampling
settings come from the recipe's `training` section (the group size, temperature and completion length training
will use), with the command line on top.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.scoring import EvalSettings
from grpo_cli.model_files import regular_file_problem
from grpo_cli.paths import check_writable_dir, write_atomic
from grpo_cli.recipe.schema.data import parse_pass_range

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

CALIBRATION = "calibration.jsonl"
"""One JSON line per calibrated prompt: key, prompt, k, passes, pass_rate, scores (what `data.pass_rate` reads)."""
PARTIAL = "calibration.partial.jsonl"
"""The same lines while calibration runs; an interrupted run leaves it for `--resume`."""
SETTINGS = "calibration.json"
"""The settings, the histogram and the counts."""
FILTERED = "filtered.jsonl"
"""The training rows (in the data's own columns) whose pass rate is in the range."""
OVERRIDE = "override.yaml"
"""The `data.pass_rate` block to add to the recipe."""
OUTPUTS = (CALIBRATION, PARTIAL, SETTINGS, FILTERED, OVERRIDE)


@dataclass(kw_only=True)
class CalibrateRequest:
    """The calibrate command's arguments; None means the recipe's value."""

    recipe: Path
    overrides: list[str] = field(default_factory=list)
    k: int | None = None
    max_prompts: int | None = None
    batch_size: int = 8
    temperature: float | None = None
    reward: str | None = None
    threshold: float = 1.0
    range: str = "(0, 1)"
    out: Path | None = None
    backend: str = "transformers"
    resume: bool = False
    force: bool = False


@dataclass
class CalibrationSettings:
    """What the sampled pass rates depend on; a resumed calibration must have the same (also what vLLM's sampler
    reads: k, temperature, top_p, max_new_tokens, seed)."""

    model: str
    reward: str
    threshold: float
    k: int
    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int
    prompt: str = ""
    """How a row becomes the prompt (`data.prompt`, the recipe's chat template); "" when not recorded (grpo
    before rows carried their settings)."""
    batch_size: int = field(default=8, compare=False)

    def differences(self, before: dict[str, Any]) -> list[str]:
        """`NAME BEFORE (now NOW)` for each setting an earlier calibration (`asdict` of its settings) had
        otherwise; batch size and an unrecorded prompt do not count."""
        now = self.row()
        return [f"{name} {before.get(name)!r} (now {value!r})" for name, value in now.items()
                if name in before and before[name] != value and not (name == "prompt" and not before[name])]

    def row(self) -> dict[str, Any]:
        """What each calibration row carries: the settings its pass rate was measured with."""
        return {k: v for k, v in asdict(self).items() if k != "batch_size"}

    def sampling(self) -> EvalSettings:
        """The evaluation sampler's settings for these draws (the samplers are shared with `grpo eval`)."""
        return EvalSettings(k=self.k, temperature=self.temperature, top_p=self.top_p,
                            max_new_tokens=self.max_new_tokens, batch_size=self.batch_size, seed=self.seed)

    def save(self, path: Path, extra: dict[str, Any]) -> None:
        write_atomic(path, json.dumps({"settings": asdict(self), **extra}, indent=2) + "\n")


def default_reward(recipe: Recipe) -> str | None:
    """The outcome reward: one named `accuracy`, else `eval.metric` when it is a reward, else the only reward."""
    labels = [e.label for e in recipe.rewards]
    if "accuracy" in labels:
        return "accuracy"
    if recipe.eval.metric in labels:
        return recipe.eval.metric
    return labels[0] if len(labels) == 1 else None


def chosen_reward(recipe: Recipe, name: str | None) -> str:
    """The reward label whose score decides pass or fail, or a paragraph saying what to pass."""
    labels = [e.label for e in recipe.rewards]
    reward = name if name is not None else default_reward(recipe)
    if reward is None:
        raise GrpoError(f"the recipe has several rewards ({', '.join(labels)}) and none is named accuracy",
                        where="--reward", fix=f"Name the outcome reward, e.g. --reward {shlex.quote(labels[0])}.")
    if reward not in labels:
        raise GrpoError(f"{reward!r} is not a reward of this recipe", where="--reward",
                        fix=f"Use one of {', '.join(labels) or '(none)'} (a label as metrics.jsonl logs it).")
    entry = next(e for e in recipe.rewards if e.label == reward)
    if entry.model:
        raise GrpoError(f"{reward!r} is a reward model, which grpo scores only during training", where="--reward",
                        fix="Calibrate with a rule or function reward (--reward NAME).")
    return reward


def check_range(text: str) -> str:
    try:
        parse_pass_range(text)
    except ValueError as exc:
        raise GrpoError(str(exc), where="--range", fix="e.g. --range '(0, 1)' or --range '[0.1, 0.9]'.") from None
    return text


def settings_for(recipe: Recipe, req: CalibrateRequest, reward: str) -> CalibrationSettings:
    t = recipe.training
    settings = CalibrationSettings(model=recipe.model.name_or_path, reward=reward, threshold=req.threshold,
                                   k=req.k or t.num_generations,
                                   temperature=t.temperature if req.temperature is None else req.temperature,
                                   top_p=float(t.get("top_p", 1.0) or 1.0), max_new_tokens=t.max_completion_length,
                                   seed=t.seed, prompt=prompt_setting(recipe), batch_size=req.batch_size)
    check_sampling(settings)
    return settings


def prompt_setting(recipe: Recipe) -> str:
    """`data.prompt` as the recipe sets it, and the recipe's own chat template (by digest): what the model is
    asked, which a pass rate depends on."""
    text = json.dumps(recipe.data.prompt.model_dump(exclude_defaults=True), sort_keys=True, ensure_ascii=False)
    template = recipe.model.chat_template
    if template:
        text += f", chat template sha256:{hashlib.sha256(template.encode('utf-8')).hexdigest()[:12]}"
    return text


def check_sampling(settings: CalibrationSettings) -> None:
    """Refuse settings that cannot give a pass rate strictly between 0 and 1, or no pass rate at all."""
    if not math.isfinite(settings.threshold):
        raise GrpoError(f"--threshold {settings.threshold} is not a number a reward can be compared with (every "
                        "completion would pass, or none)", where="--threshold",
                        fix="Give a finite score, e.g. --threshold 1 for a 0/1 reward or --threshold 0.5.")
    if not math.isfinite(settings.temperature) or settings.temperature < 0:
        raise GrpoError(f"--temperature {settings.temperature} is not a sampling temperature", where="--temperature",
                        fix="Give a finite temperature > 0, e.g. -t 1 (default: training.temperature).")
    if settings.temperature == 0:
        raise GrpoError("--temperature 0 samples greedily: the k completions of a prompt are all the same, so every "
                        "pass rate is 0 or 1 and none lies in (0, 1), the prompts GRPO learns from",
                        where="--temperature", fix="Sample with a temperature > 0, e.g. -t 1, or leave -t out to use "
                                                   "training.temperature.")
    if settings.k < 2:
        raise GrpoError(f"-k {settings.k} samples one completion per prompt: its pass rate is 0 or 1, never in (0, 1), "
                        "so it cannot tell which prompts GRPO learns from", where="--samples/-k",
                        fix="Sample at least 2 completions per prompt (-k 8 or more gives a usable pass rate; "
                            "default: training.num_generations).")


def check_out(out: Path, settings: CalibrationSettings, *, resume: bool, force: bool) -> list[Path]:
    """Refuse to mix calibrations: an earlier one in `out` is continued (--resume, same settings) or replaced
    (--force: its files are returned, removed only once every check has passed). Something other than a file
    where grpo writes one is never removed."""
    if resume and force:
        raise GrpoError("--resume continues the calibration in --out and --force replaces it; they cannot both "
                        "hold", where="--resume/--force", fix="Give one of them.")
    check_writable_dir(out, "--out")
    for name in OUTPUTS:
        path = out / name
        why = regular_file_problem(path)  # a directory, FIFO, device or a link to nothing
        if why is not None:
            raise GrpoError(f"{path} {why}, and grpo calibrate writes its own file there", where="--out",
                            fix="Move it away, or choose another --out; --force replaces only grpo's own files.")
    earlier = [name for name in OUTPUTS if (out / name).exists()]
    if not earlier:
        return []
    if force:
        return [out / name for name in earlier]
    if not resume:
        raise GrpoError(f"{out} already holds a calibration ({', '.join(earlier)})", where="--out",
                        fix="Continue it with --resume, replace it with --force, or choose another --out.")
    try:
        saved = json.loads((out / SETTINGS).read_text(encoding="utf-8"))["settings"]
        diff = settings.differences(dict(saved))
    except (OSError, ValueError, KeyError, TypeError):
        return []  # killed before its settings were written, or damaged: each row says its own settings
    if diff:
        raise settings_differ(out / SETTINGS, diff)
    return []


def settings_differ(where: Path, diff: list[str]) -> GrpoError:
    """The paragraph for a resume whose settings are not those the earlier rows were sampled with."""
    return GrpoError(f"{where} was calibrated with other settings: {', '.join(diff)}; resuming would mix pass rates "
                     "of two settings in one file", where="--resume",
                     fix="Resume with the earlier settings, or start over with --force (or another --out).")
