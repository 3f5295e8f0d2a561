"""completions.jsonl: a readable sample of what the model wrote at each logging step, and how it scored.

The first place to look for reward hacking. The sample comes from what TRL's GRPOTrainer already
keeps for its own completion logging (`trainer._logs`: prompts, completions, per-reward scores and
advantages of the latest generation batch, gathered from every process onto each of them), so
nothing is recomputed and nothing extra crosses processes: the main process writes the file.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_cli import runs
from grpo_cli.errors import GrpoError

COMPLETIONS_FILE = runs.COMPLETIONS


def message_text(value: Any) -> str:
    """A prompt or completion as plain text: strings as they are, chat messages as `role: content` lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        lines = []
        for m in value:
            if isinstance(m, dict):
                content = m.get("content")
                if isinstance(content, list):
                    content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
                lines.append(f"{m.get('role', '?')}: {content}")
            else:
                lines.append(str(m))
        return "\n".join(lines)
    return str(value)


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _short(v: Any) -> str:
    f = _finite(v)
    return "–" if f is None else f"{f:.4g}"


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of completions.jsonl; a line cut short (a killed run) is skipped."""
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


class CompletionsLog(TrainerCallback):
    """On each logging step, append up to `per_step` rows of the latest generation batch to completions.jsonl.

    Bounded: texts are cut at `max_chars`, and nothing more is written once the file passes `max_bytes`.
    Set `trainer` after building the GRPOTrainer (the callback reads its `_logs`).
    """

    def __init__(self, path: Path, *, per_step: int = 8, max_chars: int = 4000, max_bytes: int = 20_000_000,
                 seed: int = 0) -> None:
        self.path = path
        self.per_step = per_step
        self.max_chars = max_chars
        self.max_bytes = max_bytes
        self.seed = seed
        self.trainer: Any = None
        self.full = False

    def _cut(self, text: str) -> str:
        return text if len(text) <= self.max_chars else text[:self.max_chars] + f" [... {len(text)} chars]"

    def rows(self, step: int) -> list[dict[str, Any]]:
        """The sampled rows of the trainer's latest batch (empty when there is none)."""
        logs = getattr(self.trainer, "_logs", None)
        if not logs or not logs.get("prompt"):
            return []
        prompts, completions = list(logs["prompt"]), list(logs["completion"])
        rewards = {name: list(values) for name, values in logs["rewards"].items()}
        advantages = list(logs["advantages"])
        weights = getattr(self.trainer, "reward_weights", None)
        weights = [float(w) for w in weights.tolist()] if weights is not None else [1.0] * len(rewards)
        n = len(prompts)
        picked = sorted(random.Random(self.seed * 1_000_003 + step).sample(range(n), min(self.per_step, n)))
        out = []
        for i in picked:
            scores = {name: _finite(vals[i]) if i < len(vals) else None for name, vals in rewards.items()}
            total = sum(w * (s or 0.0) for w, s in zip(weights, scores.values(), strict=False))
            out.append({"step": step, "prompt": self._cut(message_text(prompts[i])),
                        "completion": self._cut(message_text(completions[i])), "reward": total,
                        "rewards": scores, "advantage": _finite(advantages[i]) if i < len(advantages) else None})
        return out

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if self.full or not state.is_world_process_zero or not logs or "reward" not in logs:
            return
        rows = self.rows(state.global_step)
        if not rows:
            return
        if self.path.exists() and self.path.stat().st_size > self.max_bytes:
            self.full = True
            return
        with self.path.open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_samples(run_dir: str | Path, *, step: int | None = None, order: str | None = None,
                 reward: str | None = None, limit: int = 10) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows of one logged step (the last one by default), optionally worst/best first by a reward.

    Returns the rows and every step that has samples, so callers can say what else there is.
    """
    run = Path(run_dir)
    path = run / COMPLETIONS_FILE
    if not path.is_file():
        raise GrpoError(f"there is no {COMPLETIONS_FILE} in {run}", where="RUN_DIR",
                        fix="Give the output dir of a `grpo train` run; it writes completion samples at every "
                            "logging step (output.completions_per_log > 0).")
    rows = read_rows(path)
    steps = sorted({int(r["step"]) for r in rows if isinstance(r.get("step"), int)})
    if not steps:
        raise GrpoError(f"{path} holds no samples yet", where="RUN_DIR", fix="Wait for the first logging step.")
    names = sorted({n for r in rows for n in (r.get("rewards") or {})})
    if reward is not None and reward not in names:
        raise GrpoError(f"no reward called {reward!r} in the samples", where="--reward",
                        fix=f"Rewards logged: {', '.join(names) or 'none'}.")
    if step is not None and step not in steps:
        raise GrpoError(f"no samples at step {step}", where="--step",
                        fix=f"Steps with samples: {_ranges(steps)}.")
    if order is None:
        chosen = [r for r in rows if r.get("step") == (steps[-1] if step is None else step)]
    else:  # worst/best across the chosen step, or the whole run when no step is given
        chosen = [r for r in rows if step is None or r.get("step") == step]

        def key(r: dict[str, Any]) -> tuple[float, float]:
            """The reward, then the advantage (ties: the completion the update pushed hardest away/towards)."""
            missing = -math.inf if order == "best" else math.inf
            v = _finite((r.get("rewards") or {}).get(reward) if reward else r.get("reward"))
            a = _finite(r.get("advantage"))
            return (missing if v is None else v, missing if a is None else a)

        chosen.sort(key=key, reverse=order == "best")
    return chosen[:limit], steps


def _ranges(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 12 else f"{steps[0]} .. {steps[-1]} ({len(steps)} steps)"


def markdown_samples(output_dir: Path, count: int = 3) -> list[str]:
    """The lowest- and highest-reward completions of the last logged step (`grpo samples` shows more)."""
    rows = read_rows(output_dir / COMPLETIONS_FILE)
    if not rows:
        return []
    last = max(int(r.get("step", 0)) for r in rows)
    rows = sorted((r for r in rows if r.get("step") == last), key=lambda r: _finite(r.get("reward")) or 0.0)
    picked = rows if len(rows) <= count else [*rows[:count // 2 + count % 2], *rows[-(count // 2):]]

    def cell(text: Any) -> str:
        text = " ".join(str(text or "").split())
        return (text[:150] + " …" if len(text) > 150 else text).replace("|", "\\|")

    lines = [f"## Sample completions (step {last}, lowest and highest reward)", "",
             "| reward | advantage | prompt | completion |", "|---:|---:|---|---|"]
    for r in picked:
        lines.append(f"| {_short(r.get('reward'))} | {_short(r.get('advantage'))} | {cell(r.get('prompt'))} | "
                     f"{cell(r.get('completion'))} |")
    return [*lines, "", f"More: `grpo samples {output_dir} --worst`.", ""]
