"""Measured step rates and the time plan built from them: the types, the machine they were measured on, the
shipped table and the per-machine file of the user's own runs.

A step's time is predicted from a step measured before: a row here says what a measured step did (its
`StepShape`: model size, backend, processes, threads, completions and tokens) and how long each part of it took
(`PARTS`, seconds per steady optimizer step), on which machine, when, with which command. The planner
(planning/time_plan.py) scales the nearest row to the recipe's step, each part as fixed seconds plus seconds
per completion (`RateRow.fixed`, fitted from two batch sizes); `grpo train` measures its own steps,
writes the row in the run's manifest and adds it to this machine's file, so the next plan here starts from it.
Rows come from: the shipped table (grpo_cli/assets/measured_rates.json: this project's 2-core CPU, the H100
check), the user's runs on this machine ($GRPO_CACHE_DIR/rates.json, default ~/.cache/grpo/rates.json), and
nothing else: where no row applies, the plan says "unknown". Standard library and pydantic only (`grpo validate`
reads it), so the plan moves with its types wherever the planner lives.
"""

from __future__ import annotations

import functools
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from grpo_cli.paths import ASSETS_DIR

PARTS = ("generation", "weight_sync", "reward", "training", "other")
"""The plan's parts of an optimizer step. `training` is the log-probabilities, forward, backward and optimizer
step of the step timer's split (artefacts/time_split.py); `other` is the rest (data, callbacks, logging)."""
SPLIT_PARTS = {"generation": "generation", "weight_sync": "weight_sync", "reward": "reward", "logprobs": "training",
               "forward": "training", "backward": "training", "optimizer": "training", "other": "other"}
"""Each part of the step timer's split -> the plan part it is measured as."""
DEFAULT_FIXED = {"weight_sync": 1.0, "other": 1.0}
"""The fixed share of a part when its row has no fit: weight sync and the rest of the step do not grow with the
completions, the other parts are taken as proportional to them."""
CACHE_ENV = "GRPO_CACHE_DIR"
RATES_FILE = "rates.json"
RATES_ENV = "GRPO_RATES_FILE"
"""Another per-machine file (the test suite keeps its runs' rates out of the user's)."""
TABLE = "measured_rates.json"
"""The shipped table, in grpo_cli/assets: rows measured by benchmarks/micro/plan_vs_measured.py --record and the
GPU check."""
KEEP_PER_MACHINE = 50
"""Rows kept per machine in the per-machine file (the newest; a run replaces the row of the same kind of step)."""
MAX_STEP_S = 1e6
"""More seconds than any measured optimizer step takes (11 days): a row beyond it is a hand edit, not a rate."""


class _Typed(BaseModel):
    model_config = ConfigDict(defer_build=True)


class StepShape(_Typed):
    """What one optimizer step of one process does: the work a part's time scales with."""

    model: str
    params: int
    lora: bool
    backend: str
    """transformers, vllm-colocate, vllm-server or vllm-async."""
    processes: int
    threads: int | None = None
    completions: int
    """Completions one process generates and trains on per optimizer step."""
    completion_tokens: int
    """training.max_completion_length."""
    prompt_tokens: float | None = None
    """Mean prompt tokens per completion: measured in a run; in a plan, data.max_prompt_tokens or unknown."""
    data: str = ""
    rewards: list[str] = []
    device: str = "cpu"
    """cpu or gpu."""
    trained: float | None = None
    """The share of completions that train (forward and backward): 1 - the zero-advantage skip's skipped share
    over a run's steady steps; in a plan, the share assumed. None: the skip is on and its share not known (a
    row from before runs recorded it). The training part grows with it."""
    prompt_share: float = 1.0
    """The share of its prompt's tokens a trained completion runs through forward and backward: 1, or
    1/num_generations with `sampling.share_prompt_forward` (one prompt pass per group). Training's per-completion
    seconds grow with prompt tokens x this + completion tokens."""

    def token_share(self, prompt: float | None = None) -> float:
        """The share of a trained completion's tokens (prompt and completion) that run forward and backward: 1,
        or less when its group shares the prompt's pass (`prompt` tokens, default the recorded mean)."""
        tokens = (self.prompt_tokens or 0.0) if prompt is None else prompt
        return (tokens * self.prompt_share + self.completion_tokens) / max(tokens + self.completion_tokens, 1.0)

    def kind(self) -> tuple[str, str, bool, str, int, int | None, str]:
        """Steps of one kind: a run replaces the remembered row of its kind."""
        return self.model, self.backend, self.lora, self.data, self.processes, self.threads, self.device


class Seconds(_Typed):
    """Seconds per steady step: the mean and the range over the steps measured."""

    mean: float
    low: float
    high: float

    def scaled(self, factor: float) -> Seconds:
        return Seconds(mean=self.mean * factor, low=self.low * factor, high=self.high * factor)


class RateRow(_Typed):
    """One measured kind of step: where, when, how, and each part's seconds per steady optimizer step."""

    machine: str
    date: str
    command: str
    shape: StepShape
    seconds: dict[str, Seconds]
    """Per part of PARTS, and `step` for the whole step."""
    steps: int
    """Steady steps measured (the first step, with its warm-up, is not counted)."""
    load: float | None = None
    note: str = ""
    run_dir: str | None = None
    """The run that measured it (rows of the user's own runs)."""
    fixed: dict[str, float] = {}
    """Per part: the seconds of the step that do not grow with its completions (a tiny model's step is mostly
    such overhead); the rest grows in proportion. Fitted from steps at two batch sizes (`fit` says which); a
    part missing here is planned as DEFAULT_FIXED says."""
    fit: str = ""
    """Where `fixed` comes from, in words."""
    decode_steps: float | None = None
    """Tokens decoded per generation batch, the mean of each batch's longest completion: transformers decodes a
    batch until its longest ends. With `clipped` and `lengths`, the plan's decode steps at another batch
    (planning/decode_steps.py); rows without them scale generation by max_completion_length."""
    clipped: float | None = None
    """The share of completions cut at max_completion_length."""
    lengths: list[float] = []
    """The lengths of the completions that ended before it, as equally likely values (quantiles)."""

    def fixed_share(self, part: str) -> float:
        """The share of this row's part that does not grow with the completions (0..1)."""
        seconds = self.seconds.get(part)
        if part not in self.fixed or seconds is None or seconds.mean <= 0:
            return DEFAULT_FIXED.get(part, 0.0)
        return min(1.0, max(0.0, self.fixed[part] / seconds.mean))

    def origin(self) -> str:
        """Where the rate comes from, in words."""
        at = f", load {self.load:.1f}" if self.load is not None else ""
        if self.run_dir:
            return f"your run {self.run_dir} ({self.date[:16]}{at})"
        return f"shipped table: `{self.command}` on {self.machine} ({self.date[:10]}{at})"


class StepEstimate(_Typed):
    """One part of the planned step: seconds (None when unknown) and where the rate came from."""

    part: str
    seconds: Seconds | None
    source: str
    how: str = ""
    """What was assumed to scale the row to this step (another model size, prompt length), if anything."""
    fixed: float | None = None
    """The seconds of the mean that do not grow with the completions (None where the plan did not split them)."""


class TimePlan(_Typed):
    """The time plan of a recipe on a machine: each part of a steady step, the run, its price."""

    machine: str
    shape: StepShape | None = None
    """The step planned (None when the model's size is unknown)."""
    parts: list[StepEstimate] = []
    steps: int | None = None
    """Optimizer steps of the run (max_steps, or epochs x steps per epoch)."""
    evaluation: Seconds | None = None
    """Evaluation over the whole run (before/after and every eval.every_steps); None when there is none."""
    evaluation_note: str = ""
    price_per_hour: float | None = None
    devices: int = 1
    """Devices paid for: the GPUs of the run (and of a vLLM server), or 1 machine on the CPU."""
    load: float | None = None
    """The load average when planned, for the reader: a rate measured under another load (a shared machine)
    differs, but scaling by it proved no better than not (docs/performance/history/2026-11-28-0935-time-plan.md)."""
    unknown: str = ""
    """Why the step could not be planned (no rate applies); empty when it was."""

    @property
    def missing(self) -> list[str]:
        """The parts whose time is unknown: the step is at least the sum of the others."""
        return [p.part for p in self.parts if p.seconds is None]

    def part(self, name: str) -> StepEstimate | None:
        return next((p for p in self.parts if p.part == name), None)

    @property
    def step(self) -> Seconds | None:
        """The steady step: the sum of its known parts (None when nothing could be planned)."""
        known = [p.seconds for p in self.parts if p.seconds is not None]
        if self.unknown or not known:
            return None
        return Seconds(mean=sum(s.mean for s in known), low=sum(s.low for s in known),
                       high=sum(s.high for s in known))

    @property
    def run(self) -> Seconds | None:
        """The whole run: steps x the steady step, plus evaluation."""
        step = self.step
        if step is None or self.steps is None:
            return None
        extra = self.evaluation or Seconds(mean=0.0, low=0.0, high=0.0)
        return Seconds(mean=step.mean * self.steps + extra.mean, low=step.low * self.steps + extra.low,
                       high=step.high * self.steps + extra.high)

    @property
    def cost(self) -> Seconds | None:
        """The run's price at price_per_hour per device-hour (None without a price or a run time)."""
        run = self.run
        if run is None or self.price_per_hour is None:
            return None
        return run.scaled(self.price_per_hour * self.devices / 3600)

    def as_dict(self) -> dict[str, object]:
        """The plan for `grpo validate --json`: the parts, and the step, run and cost worked out."""
        out: dict[str, object] = self.model_dump(mode="json")
        for name in ("step", "run", "cost"):
            value = getattr(self, name)
            out[name] = value.model_dump() if value is not None else None
        return out


def rates_path() -> Path:
    """This user's per-machine file: $GRPO_RATES_FILE, else $GRPO_CACHE_DIR/rates.json, default
    ~/.cache/grpo/rates.json."""
    if os.environ.get(RATES_ENV):
        return Path(os.environ[RATES_ENV])
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "grpo")
    return Path(base) / RATES_FILE


def _rows(data: object) -> list[RateRow]:
    rows = []
    for item in data if isinstance(data, list) else []:
        try:
            row = RateRow.model_validate(item)
        except ValidationError:
            continue  # a row a newer grpo wrote, or a hand edit: skipped, never fatal for validate
        if _measured(row):
            rows.append(row.model_copy(update={"fixed": _kept_fixed(row), **_kept_lengths(row)}))
    return rows


def _finite(value: float | None, high: float = math.inf) -> bool:
    return value is None or (math.isfinite(value) and 0 <= value <= high)


def _measured(row: RateRow) -> bool:
    """Whether a row's figures can be a measured step (a hand edit's NaN, negative or huge seconds, or a step of
    no completions, would plan a negative, NaN or endless time): such a row is skipped like an unreadable one."""
    s = row.shape
    seconds = [v for part in row.seconds.values() for v in (part.mean, part.low, part.high)]
    return (all(_finite(v, MAX_STEP_S) for v in seconds) and _finite(row.load) and _finite(s.prompt_tokens)
            and _finite(s.trained, 1.0)
            and min(s.params, s.processes, s.completions, s.completion_tokens) >= 1)


def _kept_lengths(row: RateRow) -> dict[str, Any]:
    """None of the row's completion lengths (planned as a row recorded before them) when a hand edit left any
    that a run cannot measure."""
    limit = row.shape.completion_tokens
    if (_finite(row.decode_steps, limit) and _finite(row.clipped, 1.0) and all(_finite(v, limit) for v in row.lengths)
            and (row.clipped is None or row.clipped >= 1.0 or row.lengths)):
        return {}
    return {"decode_steps": None, "clipped": None, "lengths": []}


def _kept_fixed(row: RateRow) -> dict[str, float]:
    """The row's fixed seconds that can be a fit: finite, at least 0, at most the part's own seconds (a fit
    never exceeds them; 1e-6 s for the rounding). A part whose value cannot is planned as DEFAULT_FIXED says."""
    return {part: v for part, v in row.fixed.items()
            if part in row.seconds and _finite(v, row.seconds[part].mean + 1e-6)}


@functools.cache
def _table() -> dict[str, Any]:
    data = json.loads((ASSETS_DIR / TABLE).read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def shipped_rates() -> list[RateRow]:
    """The shipped table of measured rates (grpo_cli/assets/measured_rates.json)."""
    return _rows(_table().get("rows"))


def shipped_reward_rates() -> dict[str, float]:
    """Built-in reward -> completions scored per second, from the shipped table (benchmarks/rewards.py)."""
    rates = _table().get("reward_rates", {})
    return {k: float(v) for k, v in rates.items() if isinstance(v, int | float) and v > 0}


def _read_rates(path: Path) -> dict[str, Any] | None:
    """The per-machine file's JSON object: {} when missing, None when it is not a rates file (a directory, FIFO or
    device, unreadable, damaged or binary, not a JSON object). A FIFO is never opened: reading one blocks."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return {}  # not there (a parent that is a file: remember's mkdir says so)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remembered_rates(path: Path | None = None) -> dict[str, list[RateRow]]:
    """The per-machine file: machine -> the rows of this user's runs there ({} when missing or damaged)."""
    data = _read_rates(path or rates_path()) or {}
    return {m: _rows(rows) for m, rows in data.items()}


def remember(row: RateRow, path: Path | None = None) -> Path:
    """Add a run's measured row to the per-machine file, replacing the row of the same kind of step; written
    atomically, so a killed run never leaves half a file. A path that is not a rates file (damaged, binary, a
    directory or FIFO) is kept as it is: OSError, which `grpo train` prints as a note."""
    path = path or rates_path()
    data = _read_rates(path)
    if data is None:
        raise OSError(f"{path} is not a rates file (not a regular file holding a JSON object), so it is kept "
                      f"as it is; move it away or set ${RATES_ENV} to another file")
    known = {m: _rows(rows) for m, rows in data.items()}
    same = [r for r in known.get(row.machine, []) if r.shape.kind() == row.shape.kind()]
    if same and (fixed := fit_fixed(same[-1], row)):
        row = row.model_copy(update={"fixed": fixed, "fit": f"your runs at {same[-1].shape.completions} and "
                                     f"{row.shape.completions} completions a step"})
    mine = [r for r in known.get(row.machine, []) if r.shape.kind() != row.shape.kind()] + [row]
    known[row.machine] = mine[-KEEP_PER_MACHINE:]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({m: [r.model_dump(mode="json") for r in rows] for m, rows in known.items()},
                              indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def fit_fixed(one: RateRow, other: RateRow) -> dict[str, float]:
    """Each part's fixed seconds at `other`'s step, from two measured steps of one kind at two batch sizes:
    seconds = fixed + per completion x completions, a straight line through both (held at 0 or above). A part
    whose smaller batch took longer is left out (noise on a shared machine, not a fit: the plan then takes it as
    DEFAULT_FIXED says). {} when the two have the same completions or token length. Generation is fitted per
    decode step when both rows have them, training per completion trained when both recorded the share."""
    a, b = one.shape, other.shape
    if a.completions == b.completions or a.completion_tokens != b.completion_tokens:
        return {}
    fixed = {}
    for part in PARTS:
        if part in one.seconds and part in other.seconds:
            d1, d2 = (one.decode_steps, other.decode_steps) if part == "generation" else (None, None)
            per = (d1, d2) if d1 and d2 else (1.0, 1.0)
            # training grows with the completions that trained: the zero-advantage skip's share differs by chance
            s1, s2 = (a.trained, b.trained) if part == "training" and a.trained and b.trained else (1.0, 1.0)
            if part == "training":  # and with the tokens each one ran (a group's shared prompt pass)
                s1, s2 = s1 * a.token_share(), s2 * b.token_share()
            n1, n2 = a.completions * s1, b.completions * s2
            t1, t2 = one.seconds[part].mean / per[0], other.seconds[part].mean / per[1]
            slope = (t2 - t1) / (n2 - n1) if abs(n2 - n1) > 1e-9 else -1.0
            if slope >= 0:
                fixed[part] = round(min(t2, max(0.0, t2 - slope * n2)) * per[1], 6)
    return fixed


def carry_fixed(row: RateRow, source: RateRow) -> dict[str, float]:
    """This run's fixed seconds per part from the fitted row it was planned from: the source's straight line,
    scaled to go through this run's measured part (the same shape, on a machine as many times faster or slower
    for every batch size). {} when the source has no fit."""
    if not source.fixed:
        return {}
    ratio = row.shape.completions / max(source.shape.completions, 1)
    fixed = {}
    for part in PARTS:
        if part in source.fixed and part in row.seconds:
            share, grown = source.fixed_share(part), ratio
            if part == "training" and row.shape.trained and source.shape.trained:  # per completion that trained
                grown *= row.shape.trained / source.shape.trained
            if part == "training":
                grown *= row.shape.token_share() / source.shape.token_share()
            at_this_batch = share / (share + (1 - share) * grown) if share + (1 - share) * grown > 0 else 1.0
            fixed[part] = round(row.seconds[part].mean * at_this_batch, 6)
    return fixed


def candidate_rows(this_machine: str) -> list[RateRow]:
    """Every row a plan may start from: this user's runs on this machine first, then the shipped table."""
    return [*remembered_rates().get(this_machine, []), *shipped_rates()]
