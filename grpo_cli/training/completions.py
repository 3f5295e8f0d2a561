"""The callback that writes completions.jsonl at each logging step (readers live in samples.py).

The sample comes from what TRL's GRPOTrainer already keeps for its own completion logging (`trainer._logs`:
prompts, completions, per-reward scores and advantages of the latest generation batch, gathered from every
process onto each of them), so nothing is recomputed and nothing extra crosses processes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from grpo_cli import runs
from grpo_cli.artefacts.samples import finite, message_text
from grpo_cli.training.callbacks import TrainerBound

COMPLETIONS_FILE = runs.COMPLETIONS
MAX_LOOKUP_ROWS = 200_000  # prompts -> reference answers are looked up in the train set up to this size


class CompletionsLog(TrainerBound):
    """On each logging step, append up to `per_step` rows of the latest generation batch to completions.jsonl.

    Bounded: texts are cut at `max_chars`, and nothing more is written once the file passes `max_bytes`.
    Set `trainer` after building the GRPOTrainer (the callback reads its `_logs`).
    """

    def __init__(self, path: Path, *, per_step: int = 8, max_chars: int = 4000, max_bytes: int = 20_000_000,
                 seed: int = 0, prompt_columns: set[str] | None = None) -> None:
        self.path = path
        self.per_step = per_step
        self.max_chars = max_chars
        self.max_bytes = max_bytes
        self.seed = seed
        self.full = False
        self._lookup: dict[str, dict[str, Any]] | None = None
        self.prompt_columns = set(prompt_columns or ())  # already in the prompt: not a reference

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
        texts = [(message_text(p), message_text(c)) for p, c in zip(prompts, completions, strict=False)]
        first: dict[tuple[str, str], int] = {}
        for i, pair in enumerate(texts):  # one row per distinct completion of a prompt: no duplicate rows
            first.setdefault(pair, i)
        distinct = sorted(first.values())
        rng = random.Random(self.seed * 1_000_003 + step)
        picked = sorted(rng.sample(distinct, min(self.per_step, len(distinct))))
        out = []
        for i in picked:
            scores = {name: finite(vals[i]) if i < len(vals) else None for name, vals in rewards.items()}
            total = sum(w * (s or 0.0) for w, s in zip(weights, scores.values(), strict=False))
            row = {"step": step, "prompt": self._cut(texts[i][0]), "completion": self._cut(texts[i][1]),
                   "reward": total, "rewards": scores,
                   "advantage": finite(advantages[i]) if i < len(advantages) else None}
            reference = self._references().get(texts[i][0])
            if reference:
                row["reference"] = reference
            out.append(row)
        return out

    def _references(self) -> dict[str, dict[str, Any]]:
        """Prompt text -> the row's other columns (the answer the rewards compare with), from the train set."""
        if self._lookup is None:
            self._lookup = {}
            data = getattr(self.trainer, "train_dataset", None)
            columns = [c for c in getattr(data, "column_names", None) or []
                       if c not in ("prompt", "images", "image", *self.prompt_columns)]
            if data is not None and columns and len(data) <= MAX_LOOKUP_ROWS:
                for row in data:
                    self._lookup.setdefault(message_text(row["prompt"]),
                                            {c: self._cut(str(row[c])) for c in columns if row[c] is not None})
        return self._lookup

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
