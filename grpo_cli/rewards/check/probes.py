"""Where `check-rewards` gets completions: built-in probes per data row, or a JSONL file.

Probes are the completions a policy is likely to stumble into early in training (a right
answer, a wrong one, nothing, bare tags, an answer with no reasoning, a run cut off by the
length budget, degenerate repetition), written in the recipe's own format, so a reward that
pays more for one of them than for the reference answer is one the policy will learn to game.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema import Recipe
from grpo_cli.rewards.builtins.answers import reference_answer, to_number

TAG_REWARDS = frozenset({"format", "soft_format", "tag_count", "code_format"})
ANSWER_REWARDS = frozenset({"accuracy", "length", "cosine"})
REASONING = ("Step 1: Read the question and note what is asked.\n"
             "Step 2: Work through the calculation carefully.\n"
             "Step 3: Check the result against the question.")
PADDING = ("I am not sure yet, so let me think about the problem once more from the beginning, "
           "considering every detail of the question before I write anything down. ")
REPEAT = "Let me check that again. "
NO_SOLUTION = "```python\n# the data has no reference solution for this row\n```"


@dataclass(frozen=True)
class ProbeStyle:
    """How the recipe expects an answer to look: in think/answer tags, or bare (optionally boxed / ####)."""

    tags: bool
    think_tag: str = "think"
    answer_tag: str = "answer"
    answer_format: str = "auto"

    def describe(self) -> str:
        if self.tags:
            return f"<{self.think_tag}>…</{self.think_tag}>\\n<{self.answer_tag}>…</{self.answer_tag}>"
        return {"boxed": "\\boxed{answer}", "gsm8k": "#### answer"}.get(self.answer_format, "the bare answer")


def probe_style(recipe: Recipe) -> ProbeStyle:
    """Tags when a reward checks them (or the prompt asks for them); else the bare answer format."""
    think, answer, fmt, tags = "think", "answer", "auto", False
    for entry in recipe.rewards:
        if entry.kind != "builtin":
            continue
        think = str(entry.params.get("think_tag", think))
        answer = str(entry.params.get("answer_tag", answer))
        if entry.name in TAG_REWARDS:
            tags = True
        if entry.name in ANSWER_REWARDS:
            fmt = str(entry.params.get("answer_format", fmt)) if fmt == "auto" else fmt
            tags = tags or entry.params.get("answer_format") == "answer_tag"
    prompt = recipe.data.prompt
    if f"<{answer}>" in f"{prompt.system_prompt or ''} {prompt.template or ''}":
        tags = True
    return ProbeStyle(tags, think, answer, fmt)


def row_reference(columns: dict[str, Any], recipe: Recipe) -> str | None:
    """The row's normalised reference answer (the recipe's answer column, else answer / solution)."""
    names = [recipe.data.answer.into] if recipe.data.answer else []
    for name in (*names, "answer", "solution"):
        if columns.get(name) is not None:
            return reference_answer(columns[name])
    return None


def wrong_answer(ref: str) -> str:
    """A plausible wrong answer: the number plus one, or 0."""
    value = to_number(ref)
    if value is None:
        return "0" if ref.strip() != "0" else "1"
    value += 1
    return str(int(value)) if value == int(value) else f"{value:g}"


def make_probes(columns: dict[str, Any], style: ProbeStyle, ref: str | None,
                budget_chars: int) -> list[tuple[str, str]]:
    """(probe name, completion text) for one row; the first is always the reference."""
    t, a = style.think_tag, style.answer_tag
    is_code = ref is None and columns.get("tests") is not None
    solution = columns.get("reference_code")  # a known-good program, for code rows that ship one
    right = (f"```python\n{solution.strip()}\n```" if solution else NO_SOLUTION) if is_code else (
        ref if ref is not None else "unknown")
    wrong = "```python\nraise NotImplementedError\n```" if is_code else wrong_answer(right)
    tags_only = f"<{t}>\n</{t}>\n<{a}>\n</{a}>"
    padding = (PADDING * (budget_chars // len(PADDING) + 2)).strip()
    if style.tags:
        def full(answer: str, reasoning: str = REASONING) -> str:
            return f"<{t}>\n{reasoning}\n</{t}>\n<{a}>\n{answer}\n</{a}>"

        return [("reference", full(right)), ("wrong", full(wrong)), ("empty", ""), ("tags_only", tags_only),
                ("no_reasoning", f"<{a}>\n{right}\n</{a}>"), ("overlong", full(right, f"{REASONING}\n{padding}")),
                ("repeated", full(right, (REPEAT * 20).strip()))]

    def bare(answer: str) -> str:
        return {"boxed": f"\\boxed{{{answer}}}", "gsm8k": f"#### {answer}"}.get(style.answer_format, answer)

    return [("reference", bare(right)), ("wrong", bare(wrong)), ("empty", ""), ("tags_only", tags_only),
            ("overlong", f"{padding} {bare(right)}"), ("repeated", " ".join([bare(right)] * 20))]


class Tokens:
    """Token ids as TRL passes them (`completion_ids`, EOS included when the text ends), and the length budget.

    Without a tokenizer (offline, hub model not cached) lengths are estimated at 4 characters a token.
    """

    CHARS_PER_TOKEN = 4

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer
        self.eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else 0

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            return [0] * math.ceil(len(text) / self.CHARS_PER_TOKEN)
        return list(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def clip(self, text: str, budget: int) -> tuple[str, list[int]]:
        """Cut `text` at `budget` tokens as generation would; a finished text gets its EOS id."""
        ids = self.encode(text)
        if len(ids) + 1 <= budget or budget <= 0:
            return text, ids + ([self.eos] if self.eos is not None else [])
        if self.tokenizer is None:
            return text[:budget * self.CHARS_PER_TOKEN], ids[:budget]
        ids = ids[:budget]
        return self.tokenizer.decode(ids, skip_special_tokens=True), ids


# ------------------------------------------------------------------ --completions FILE.jsonl


@dataclass
class FileLine:
    """One completion from a --completions file: for a data row, or with its own prompt and columns."""

    line: int
    completion: Any
    row: int | None = None
    prompt: Any = None
    columns: dict[str, Any] = field(default_factory=dict)


def _messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value) and bool(value)


def read_completions(path: Path, num_rows: int, recipe: Recipe) -> list[FileLine]:
    """Parse and validate a completions file; every problem names the file and line.

    Each line is a JSON object with `completion` (text, or assistant messages for chat recipes) and either
    `row` (an index into the recipe's training rows, as numbered by check-rewards) or `prompt` plus any
    dataset columns the rewards read (`answer`, `tests`, ...).
    """
    if not path.is_file():
        raise GrpoError("completions file not found", where=str(path), fix="Give a .jsonl file.")
    chat = recipe.data.prompt.chat
    out: list[FileLine] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise GrpoError(f"not valid JSON ({exc.msg} at column {exc.colno})", where=where,
                            fix='Write one object per line, e.g. {"row": 0, "completion": "..."}.') from None
        if not isinstance(obj, dict):
            raise GrpoError(f"expected a JSON object, got {type(obj).__name__}", where=where,
                            fix='Write one object per line, e.g. {"row": 0, "completion": "..."}.')
        if "completion" not in obj:
            raise GrpoError("missing key 'completion'", where=where,
                            fix=f"Keys found: {', '.join(obj) or 'none'}; add the completion text.")
        completion = obj.pop("completion")
        if isinstance(completion, str):
            completion = [{"role": "assistant", "content": completion}] if chat else completion
        elif not (chat and _messages(completion)):
            kind = "text or a list of assistant messages" if chat else "text"
            raise GrpoError(f"'completion' must be {kind}, got {type(completion).__name__}", where=where)
        if "row" in obj:
            row = obj.pop("row")
            if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < num_rows:
                raise GrpoError(f"'row' must be an integer from 0 to {num_rows - 1}, got {row!r}", where=where,
                                fix=f"The recipe's training data has {num_rows} rows (after filtering), "
                                    "numbered as check-rewards prints them.")
            out.append(FileLine(number, completion, row=row))
            continue
        if "prompt" not in obj:
            raise GrpoError("give 'row' (a data row index) or 'prompt' (with the columns the rewards need)",
                            where=where)
        prompt = obj.pop("prompt")
        if chat and isinstance(prompt, str):
            system = recipe.data.prompt.system_prompt
            prompt = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": prompt}]
        elif chat and not _messages(prompt):
            raise GrpoError(f"'prompt' must be text or a list of messages, got {type(prompt).__name__}", where=where)
        elif not chat and not isinstance(prompt, str):
            raise GrpoError(f"'prompt' must be text for this recipe (chat: false), got {type(prompt).__name__}",
                            where=where)
        out.append(FileLine(number, completion, prompt=prompt, columns=obj))
    if not out:
        raise GrpoError("the completions file has no lines", where=str(path),
                        fix='Write one JSON object per line, e.g. {"row": 0, "completion": "..."}.')
    return out
