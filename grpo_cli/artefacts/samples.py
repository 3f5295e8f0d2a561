"""Reading completions.jsonl back: `grpo samples`, and the samples `grpo report` shows (no torch needed).

completions.jsonl is a readable sample of what the model wrote at each logging step, and how it scored.

The first place to look for reward hacking. The sample comes from what TRL's GRPOTrainer already
keeps for its own completion logging (`trainer._logs`: prompts, completions, per-reward scores and
advantages of the latest generation batch, gathered from every process onto each of them), so
nothing is recomputed and nothing extra crosses processes: the main process writes the file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.terminal_text import visible

COMPLETIONS_FILE = runs.COMPLETIONS


def message_text(value: Any) -> str:
    """A prompt or completion as plain text: strings as they are, chat messages as `role: content` lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        return "\n".join(_message_line(m) if isinstance(m, dict) else str(m) for m in value)
    return str(value)


def _message_line(m: dict[str, Any]) -> str:
    """`role: content`; an assistant's tool calls as `add(a=12, b=34)`, a tool's result as `tool add: 46`."""
    content = m.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    content = "" if content is None else str(content)
    role = str(m.get("role", "?"))
    if role == "tool" and m.get("name"):
        role = f"tool {m['name']}"
    calls = [tool_call_text(c) for c in m.get("tool_calls") or []]
    if calls:
        content = " ".join(x for x in (content.strip(), "→ " + "; ".join(calls)) if x)
    return f"{role}: {content}"


def tool_call_text(call: Any) -> str:
    """One tool call as `name(arg=value, ...)` (TRL's `{"function": {"name", "arguments"}}` or flat)."""
    if not isinstance(call, dict):
        return str(call)
    inner = call.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else call
    args = fn.get("arguments")
    if isinstance(args, str):
        import json

        try:
            args = json.loads(args)
        except ValueError:
            return f"{fn.get('name', '?')}({args})"
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else ""
    return f"{fn.get('name', '?')}({shown})"


def reference_text(reference: Any) -> str:
    """The row's reference columns (what the rewards compared with) as `answer: 1177`."""
    if not isinstance(reference, dict) or not reference:
        return ""
    return "; ".join(f"{k}: {v}" for k, v in reference.items())


def finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _short(v: Any) -> str:
    f = finite(v)
    return "–" if f is None else f"{f:.4g}"


def read_samples(run_dir: str | Path, *, step: int | None = None, order: str | None = None,
                 reward: str | None = None, limit: int = 10) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows of one logged step (the last one by default), optionally worst/best first by a reward.

    Returns the rows and every step that has samples, so callers can say what else there is.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise GrpoError(f"{run} {'is a file' if run.exists() else 'does not exist'}, not a run directory",
                        where="RUN_DIR", fix="Give the output dir of a `grpo train` run (output.dir or --output-dir).")
    path = runs.run_file(run, COMPLETIONS_FILE, "RUN_DIR",
                         "samples at every logging step (output.completions_per_log > 0)")
    garbled: list[int] = []
    records = runs.read_jsonl(path, garbled)
    # A record with neither prompt nor completion is no sample (a hand-edited or foreign file): shown, it is an
    # empty row that reads like a model that said nothing.
    rows = unique_rows(r for r in records if r.get("prompt") is not None or r.get("completion") is not None)
    fix = ("grpo train writes step, prompt, completion and rewards per line; restore the file from a copy, or train "
           "again.")
    if records and not rows:
        raise GrpoError(f"{path} is damaged: none of its {len(records)} record(s) has a prompt or a completion",
                        where="RUN_DIR", fix=fix)
    for r in rows:  # a hand-edited line: per-reward scores that are no table are no scores
        if not isinstance(r.get("rewards"), dict):
            r["rewards"] = {}
    steps = sorted({int(r["step"]) for r in rows if isinstance(r.get("step"), int)})
    if rows and not steps:
        raise GrpoError(f"{path} is damaged: none of its {len(rows)} sample(s) has a whole-number step (the first "
                        f"has {rows[0].get('step')!r})", where="RUN_DIR", fix=fix)
    if not rows and garbled:
        raise runs.damaged_jsonl(path, garbled, "RUN_DIR")
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
            v = finite((r.get("rewards") or {}).get(reward) if reward else r.get("reward"))
            a = finite(r.get("advantage"))
            return (missing if v is None else v, missing if a is None else a)

        chosen.sort(key=key, reverse=order == "best")
    return chosen[:limit], steps


def unique_rows(rows: Any) -> list[dict[str, Any]]:
    """Rows without repeats of the same step, prompt and completion (a group often samples one answer twice)."""
    seen: set[tuple[Any, str, str]] = set()
    out = []
    for r in rows:
        key = (r.get("step"), str(r.get("prompt")), str(r.get("completion")))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _ranges(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 12 else f"{steps[0]} .. {steps[-1]} ({len(steps)} steps)"


def markdown_samples(output_dir: Path, count: int = 3) -> list[str]:
    """The lowest- and highest-reward completions of the last logged step (`grpo samples` shows more)."""
    rows = runs.read_jsonl(output_dir / COMPLETIONS_FILE)
    if not rows:
        return []
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    if not steps:
        return []
    last = max(steps)
    rows = sorted(unique_rows(r for r in rows if r.get("step") == last), key=lambda r: finite(r.get("reward")) or 0.0)
    picked = rows if len(rows) <= count else [*rows[:count // 2 + count % 2], *rows[-(count // 2):]]

    def cell(text: Any) -> str:  # escapes shown, not kept: report.md is read with `cat` and on the Hub
        text = visible(" ".join(str(text or "").split()))
        return (text[:150] + " …" if len(text) > 150 else text).replace("|", "\\|")

    lines = [f"## Sample completions (step {last}, lowest and highest reward)", "",
             "| reward | advantage | prompt | reference | completion |", "|---:|---:|---|---|---|"]
    for r in picked:
        lines.append(f"| {_short(r.get('reward'))} | {_short(r.get('advantage'))} | {cell(r.get('prompt'))} | "
                     f"{cell(reference_text(r.get('reference')))} | {cell(r.get('completion'))} |")
    return [*lines, "", f"More: `grpo samples {output_dir} --worst`.", ""]


def select_samples(run_dir: str | Path, *, step: int | None = None, worst: bool = False, best: bool = False,
                   reward: str | None = None, limit: int = 10) -> tuple[list[dict[str, Any]], str]:
    """`grpo samples`: the rows to show and a title saying which. `--reward` alone sorts worst first."""
    if worst and best:
        raise GrpoError("give --worst or --best, not both", where="command line")
    order = "worst" if worst else "best" if best else ("worst" if reward else None)
    rows, steps = read_samples(run_dir, step=step, order=order, reward=reward, limit=limit)
    where = f"step {step}" if step is not None else (f"steps {steps[0]}–{steps[-1]}" if order else f"step {steps[-1]}")
    what = f"{order} by {reward or 'total reward'}, " if order else ""
    return rows, f"{run_dir} · {where} · {what}{len(rows)} shown"
