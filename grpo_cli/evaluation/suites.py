"""Benchmark suites: the rows of a suite in `suite_table` (or of the user's own file), its prompt, and its scoring.

Each suite fixes three things so numbers are comparable between runs and with published ones: the rows (read
from grpo_cli/assets/benchmarks, gzip-compressed copies of the upstream files), a zero-shot chat prompt that asks
for the suite's own answer format, and the answer extraction and comparison. Which suites exist, and what each
one's reader, prompt and scorer are, is the table's (`grpo_cli.suite_table`); this module does what a row says.
Nothing here imports torch: loading and scoring are plain Python.
"""

from __future__ import annotations

import gzip
import importlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.scoring import EvalResult, EvalSettings
from grpo_cli.paths import ASSETS_DIR
from grpo_cli.rewards.builtins.answers import answers_match, last_boxed, numbers, parse_completion_answer, to_number
from grpo_cli.suite_table import BOXED_PROMPT, SUITES, Scorer, suite_key, suite_problem

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

BENCHMARKS_DIR = ASSETS_DIR / "benchmarks"
Prompt = str | list[dict[str, str]]
"""A prompt as the samplers take it: text, or chat messages."""


@dataclass(frozen=True)
class SuiteRow:
    """One test problem: its upstream id, the question shown to the model and the normalised reference."""

    id: str
    question: str
    reference: str


@dataclass(frozen=True)
class Suite:
    """A suite ready to run: its rows (read on demand), the prompt it asks in, and how it scores an answer."""

    name: str
    title: str
    template: str
    """The zero-shot prompt, `{question}` filled in."""
    scorer: Scorer
    read: Callable[[], list[SuiteRow]]
    bundled: bool = True
    """A row of the table (False: the user's own file, which is never a Hub result)."""

    def rows(self, limit: int | None = None) -> list[SuiteRow]:
        """The first `limit` rows in upstream order (all of them by default)."""
        rows = self.read()
        return rows[:limit] if limit else rows

    def prompt(self, row: SuiteRow) -> str:
        return self.template.format(question=row.question)

    def messages(self, row: SuiteRow) -> list[dict[str, str]]:
        """The zero-shot chat prompt: one user turn, no system prompt, no examples."""
        return [{"role": "user", "content": self.prompt(row)}]

    def prompts(self, rows: list[SuiteRow], tokenizer: object) -> list[Prompt]:
        """Chat messages when the tokenizer has a chat template (the suites' zero-shot chat prompt), else text."""
        if getattr(tokenizer, "chat_template", None):
            return [self.messages(r) for r in rows]
        return [self.prompt(r) for r in rows]

    def extract(self, completion: str) -> str | None:
        return extract_suite_answer(completion, self.scorer)

    def is_correct(self, completion: str, reference: str) -> bool:
        """Whether the completion's extracted answer equals the reference (numbers compared as numbers)."""
        answer = self.extract(completion)
        if answer is None:
            return False
        if self.scorer == "number":
            a, b = to_number(answer), to_number(reference)
            return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        return answers_match(answer, reference)

    def score(self, rows: list[SuiteRow], texts: list[str], settings: EvalSettings, *, label: str = "",
              truncated: list[bool] | None = None, lengths: list[int] | None = None,
              source: str = "") -> EvalResult:
        """Extract and compare every completion (prompt-major, settings.k per row): one 0/1 `correct` reward."""
        refs = [r.reference for r in rows for _ in range(settings.k)]
        correct: list[float | None] = [float(self.is_correct(t, ref)) for t, ref in zip(texts, refs, strict=True)]
        return EvalResult(label, len(rows), settings.k, {"correct": correct}, list(texts), list(lengths or []),
                          list(truncated or []), "correct", [r.question for r in rows],
                          {"id": [r.id for r in rows], "reference": [r.reference for r in rows]},
                          settings=settings, source=source, suite=self.name,
                          suite_size=suite_size(self.name) if self.bundled else None,
                          extracted=[self.extract(t) for t in texts])


def extract_suite_answer(text: str, scorer: Scorer) -> str | None:
    r"""The final answer of a completion: `#### 1,080` -> "1080"; `\boxed{\frac{1}{2}}` -> "\frac{1}{2}"."""
    if scorer == "boxed":
        return last_boxed(text)
    if scorer != "number":
        raise ValueError(f"unknown suite scorer {scorer!r}")
    after = parse_completion_answer(text, "gsm8k")  # the text after the last ####
    found = numbers(after) if after is not None else []
    if found:
        return found[0]
    found = numbers(text.replace("$", " "))  # lm-eval's "flexible" fallback: the last number anywhere
    return found[-1] if found else None


def _read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def gsm8k_rows(path: Path) -> list[SuiteRow]:
    """GSM8K: `question`; the reference after the last `####`, thousands separators removed."""
    out = []
    for i, r in enumerate(_read_jsonl_gz(path)):
        ref = r["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        out.append(SuiteRow(f"test-{i}", r["question"], ref))
    return out


def math500_rows(path: Path) -> list[SuiteRow]:
    """MATH-500: `problem`, `answer` (LaTeX), id `unique_id`."""
    return [SuiteRow(r["unique_id"], r["problem"], r["answer"]) for r in _read_jsonl_gz(path)]


def svamp_rows(path: Path) -> list[SuiteRow]:
    """SVAMP: `Body + " " + Question`; `Answer` written as an integer when it is one."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    rows = []
    for r in data:
        answer = float(r["Answer"])
        ref = str(int(answer)) if answer.is_integer() else str(answer)
        rows.append(SuiteRow(r["ID"], f"{r['Body'].strip()} {r['Question'].strip()}", ref))
    return rows


def file_rows(path: Path) -> list[SuiteRow]:
    """A local JSONL (optionally .gz) of {problem|question, answer[, id]} rows."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                question, answer = r.get("problem") or r["question"], r["answer"]
            except (ValueError, KeyError, AttributeError) as exc:
                raise GrpoError(f"{path}:{i + 1}: each line must be a JSON object with `problem` (or `question`) "
                                f"and `answer` ({type(exc).__name__})", where="eval.suite_files") from None
            rows.append(SuiteRow(str(r.get("id", i)), str(question), str(answer).strip()))
    return rows


def _bundled_suite(key: str) -> Suite:
    """The table's row `key` as a runnable suite: its `module:function` reader resolved now, on first use."""
    spec = SUITES[key]
    assert spec.loader is not None
    module, function = spec.loader.split(":")
    reader: Callable[[Path], list[SuiteRow]] = getattr(importlib.import_module(module), function)
    path = BENCHMARKS_DIR / spec.name / spec.file
    return Suite(spec.name, spec.title, spec.prompt, spec.scorer, lambda: reader(path))


def get_suite(name: str, where: str = "--suite", files: dict[str, Path] | None = None) -> Suite:
    """The suite called `name` (bundled, or a local file from `files`), or a clear error saying what there is."""
    if files and name in files:
        path = files[name]
        if not path.is_file():
            raise GrpoError(f"suite file {path} not found", where=f"eval.suite_files.{name}",
                            fix="Paths are relative to the recipe's directory.")
        return Suite(name, f"{name} (local file {path.name})", BOXED_PROMPT, "boxed", lambda: file_rows(path),
                     bundled=False)
    problem = suite_problem(name)
    if problem is not None:
        raise GrpoError(problem.what, where=where, fix=problem.fix)
    return _bundled_suite(suite_key(name))


def recipe_suite_files(recipe: Recipe | None) -> dict[str, Path]:
    """The recipe's eval.suite_files, resolved against the recipe's directory."""
    if recipe is None:
        return {}
    return {name: recipe.resolve_path(p) for name, p in recipe.eval.suite_files.items()}


@cache
def suite_size(name: str) -> int:
    """How many problems the whole bundled suite has (a `--limit` run covers fewer: a smoke test, not a result)."""
    return len(_bundled_suite(name).rows())
