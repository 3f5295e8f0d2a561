"""Where `check-rewards` gets completions: built-in probes per data row, or a JSONL file.

Probes are the completions a policy is likely to stumble into early in training (a right
answer, a wrong one, nothing, bare tags, an answer with no reasoning, a run cut off by the
length budget, degenerate repetition), written in the recipe's own format, so a reward that
pays more for one of them than for the reference answer is one the policy will learn to game.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.paths import read_text
from grpo_cli.recipe.schema import Recipe
from grpo_cli.rewards.builtins import BUILTIN_REWARDS
from grpo_cli.rewards.builtins.answers import reference_answer, to_number
from grpo_cli.rewards.builtins.code import extract_code

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
    code: bool = False
    """A `code` reward is in the recipe: rows are programming problems, probes are programs."""
    separators: tuple[str, str, str, str] = ("\n", "\n", "\n", "")
    """Whitespace after <think>, between </think> and <answer>, around the answer, after </answer>."""
    declared_by: str = ""
    """Where the format came from (a reward's parameters, the system prompt); empty when nothing declares one."""

    def describe(self) -> str:
        if self.tags:
            a, gap, inner, end = self.separators
            text = f"<{self.think_tag}>{a}…{a}</{self.think_tag}>{gap}<{self.answer_tag}>{inner}…{inner}" \
                   f"</{self.answer_tag}>{end}"
            return text.replace("\n", "\\n") + (f" (from {self.declared_by})" if self.declared_by else "")
        return {"boxed": "\\boxed{answer}", "gsm8k": "#### answer"}.get(self.answer_format, "the bare answer")


_TAG = re.compile(r"<([A-Za-z_][\w-]*)>")


def _declared_layout(text: str, answer: str) -> tuple[str, tuple[str, str, str, str]] | None:
    """(think tag, separators) of a `<x>…</x>…<answer>…</answer>` skeleton written out in a prompt."""
    for think in dict.fromkeys(_TAG.findall(text)):
        if think == answer:
            continue
        found = re.search(rf"<{re.escape(think)}>([ \t]*\n?)[^<]*?\s*</{re.escape(think)}>(\s*)"
                          rf"<{re.escape(answer)}>([ \t]*\n?)[^<]*?\s*</{re.escape(answer)}>(\n?)", text)
        if found:
            after, gap, inner, end = found.groups()
            return think, (after, gap, inner, end)
    return None


def probe_style(recipe: Recipe) -> ProbeStyle:
    """Tags when a reward checks them (or the prompt asks for them); else the bare answer format.

    The tags and the layout follow what the recipe declares: a reward's `think_tag` / `answer_tag`, or a
    `<reasoning>…</reasoning><answer>…</answer>` skeleton written out in the system prompt or template.
    """
    think, answer, fmt, tags, code, declared = "think", "answer", "auto", False, False, ""
    for entry in recipe.rewards:
        if entry.kind != "builtin":
            continue
        if "think_tag" in entry.params or "answer_tag" in entry.params:
            declared = f"the parameters of reward {entry.label!r}"
        think = str(entry.params.get("think_tag", think))
        answer = str(entry.params.get("answer_tag", answer))
        code = code or entry.name == "code"
        row = BUILTIN_REWARDS.get(entry.name or "")
        if row is not None and row.tags_only:
            tags = True
            declared = declared or f"reward {entry.label!r}"
        if row is not None and "answer" in row.columns:  # compared with the answer: `answer_format` applies
            fmt = str(entry.params.get("answer_format", fmt)) if fmt == "auto" else fmt
            tags = tags or entry.params.get("answer_format") == "answer_tag"
    prompt = recipe.data.prompt
    text = f"{prompt.system_prompt or ''}\n{prompt.template or ''}"
    separators = ("\n", "\n", "\n", "")
    by_reward = tags  # a built-in tag reward fixes the layout (newlines); the prompt may only name the tags
    where = "the system prompt" if prompt.system_prompt and "<" in prompt.system_prompt else "the prompt template"
    candidates = [answer] if f"<{answer}>" in text or by_reward or answer != "answer" else [
        t for t in dict.fromkeys(_TAG.findall(text)) if f"</{t}>" in text]
    for candidate in candidates:
        layout = _declared_layout(text, candidate)
        if layout is None:
            continue
        answer, tags = candidate, True
        if not by_reward:  # the rewards check their own tags (`think` unless a parameter says otherwise)
            think, separators = layout
        declared = declared or where
        break
    if f"<{answer}>" in text and not tags:
        tags, declared = True, declared or where
    return ProbeStyle(tags, think, answer, fmt, code, separators, declared)


def row_reference(columns: dict[str, Any], recipe: Recipe) -> str | None:
    """The row's normalised reference answer (the recipe's answer column, else answer / solution)."""
    names = [recipe.data.answer.into] if recipe.data.answer else []
    for name in (*names, "answer", "solution"):
        value = columns.get(name)
        if value is not None and not isinstance(value, dict | list):
            return reference_answer(value)
    return None


# Columns that hold a known-good program for a code row, in the names public code datasets use.
SOLUTION_COLUMNS = ("reference_code", "gold_standard_solution", "solution", "code", "canonical_code")
TRIVIAL_PROGRAM = "```python\nprint(42)\n```"


def code_solution(columns: dict[str, Any]) -> str | None:
    """A row's reference program (a fenced block is unwrapped), or None when the data has none."""
    for name in SOLUTION_COLUMNS:
        value = columns.get(name)
        if isinstance(value, str) and value.strip():
            return (extract_code(value) or value).strip()
    return None


def wrong_answer(ref: str) -> str:
    """A plausible wrong answer: the number plus one, or 0."""
    value = to_number(ref)
    if value is None:
        return "0" if ref.strip() != "0" else "1"
    value += 1
    return str(int(value)) if value == int(value) else f"{value:g}"


def is_code_row(columns: dict[str, Any], style: ProbeStyle, ref: str | None) -> bool:
    """Rows the probes answer with programs: a `code` reward's rows, or rows with tests and no answer."""
    return columns.get("tests") is not None and (style.code or ref is None)


def make_probes(columns: dict[str, Any], style: ProbeStyle, ref: str | None,
                budget_chars: int) -> list[tuple[str, str]]:
    """(probe name, completion text) for one row; the first is always the reference.

    Code rows also get `trivial`: a program that ignores its input. Scoring it above the reference
    program means the tests are not read as tests.
    """
    t, a = style.think_tag, style.answer_tag
    is_code = is_code_row(columns, style, ref)
    solution = code_solution(columns) if is_code else None
    right = (f"```python\n{solution}\n```" if solution else NO_SOLUTION) if is_code else (
        ref if ref is not None else "unknown")
    wrong = "```python\nraise NotImplementedError\n```" if is_code else wrong_answer(right)
    after, gap, inner, end = style.separators
    tags_only = f"<{t}>{after}</{t}>{gap}<{a}>{inner}</{a}>{end}"
    padding = (PADDING * (budget_chars // len(PADDING) + 2)).strip()
    extra = [("trivial", TRIVIAL_PROGRAM)] if is_code else []
    if style.tags:
        def full(answer: str, reasoning: str = REASONING) -> str:
            return f"<{t}>{after}{reasoning}{after}</{t}>{gap}<{a}>{inner}{answer}{inner}</{a}>{end}"

        extra = [(name, full(text)) for name, text in extra]
        return [("reference", full(right)), ("wrong", full(wrong)), ("empty", ""), ("tags_only", tags_only),
                ("no_reasoning", f"<{a}>{inner}{right}{inner}</{a}>{end}"),
                ("overlong", full(right, f"{REASONING}\n{padding}")),
                ("repeated", full(right, (REPEAT * 20).strip())), *extra]

    def bare(answer: str) -> str:
        return {"boxed": f"\\boxed{{{answer}}}", "gsm8k": f"#### {answer}"}.get(style.answer_format, answer)

    return [("reference", bare(right)), ("wrong", bare(wrong)), ("empty", ""), ("tags_only", tags_only),
            ("overlong", f"{padding} {bare(right)}"), ("repeated", " ".join([bare(right)] * 20)), *extra]


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
    text = read_text(path, what="completions file", where=str(path), missing_fix="Give a .jsonl file.")
    chat = recipe.data.prompt.chat
    out: list[FileLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
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
