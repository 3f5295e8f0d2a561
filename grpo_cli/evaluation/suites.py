"""Benchmark suites shipped with the package: GSM8K test, MATH-500 and SVAMP, scored offline.

Each suite fixes three things so numbers are comparable between runs and with published ones:
the rows (read from grpo_cli/assets/benchmarks, gzip-compressed copies of the upstream files),
a zero-shot chat prompt that asks for the suite's own answer format, and the answer extraction
and comparison. Nothing here imports torch: loading and scoring are plain Python.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError
from grpo_cli.paths import ASSETS_DIR
from grpo_cli.rewards.builtins.answers import answers_match, last_boxed, numbers, parse_completion_answer, to_number

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

BENCHMARKS_DIR = ASSETS_DIR / "benchmarks"

NUMERIC_PROMPT = ("Solve the following math word problem. Think step by step, then write the final answer as a "
                  "number on the last line in the form \"#### <answer>\".\n\n{question}")
BOXED_PROMPT = ("Solve the following math problem. Think step by step, then put your final answer within "
                "\\boxed{{}}.\n\n{question}")


@dataclass(frozen=True)
class SuiteRow:
    """One test problem: its upstream id, the question shown to the model and the normalised reference."""

    id: str
    question: str
    reference: str


@dataclass(frozen=True)
class Suite:
    """A benchmark: where its rows come from, how it prompts, and how it extracts and compares answers."""

    name: str
    title: str
    file: str
    source: str
    prompt_template: str
    reader: Callable[[Path], list[SuiteRow]]
    answer_format: str
    """`gsm8k`: the number after the last `####`, else the last number; `boxed`: the last \\boxed{}."""

    def rows(self, limit: int | None = None) -> list[SuiteRow]:
        """The first `limit` rows in upstream order (all of them by default)."""
        rows = self.reader(BENCHMARKS_DIR / self.name / self.file)
        return rows[:limit] if limit else rows

    def prompt(self, row: SuiteRow) -> str:
        return self.prompt_template.format(question=row.question)

    def messages(self, row: SuiteRow) -> list[dict[str, str]]:
        """The zero-shot chat prompt: one user turn, no system prompt, no examples."""
        return [{"role": "user", "content": self.prompt(row)}]

    def extract(self, completion: str) -> str | None:
        return extract_suite_answer(completion, self.answer_format)

    def is_correct(self, completion: str, reference: str) -> bool:
        """Whether the completion's extracted answer equals the reference (numbers compared as numbers)."""
        answer = self.extract(completion)
        if answer is None:
            return False
        if self.answer_format == "gsm8k":
            a, b = to_number(answer), to_number(reference)
            return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        return answers_match(answer, reference)


def extract_suite_answer(text: str, answer_format: str) -> str | None:
    r"""The final answer of a completion: `#### 1,080` -> "1080"; `\boxed{\frac{1}{2}}` -> "\frac{1}{2}"."""
    if answer_format == "boxed":
        return last_boxed(text)
    if answer_format != "gsm8k":
        raise ValueError(f"unknown suite answer format {answer_format!r}")
    after = parse_completion_answer(text, "gsm8k")  # the text after the last ####
    found = numbers(after) if after is not None else []
    if found:
        return found[0]
    found = numbers(text.replace("$", " "))  # lm-eval's "flexible" fallback: the last number anywhere
    return found[-1] if found else None


def _read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _gsm8k_rows(path: Path) -> list[SuiteRow]:
    out = []
    for i, r in enumerate(_read_jsonl_gz(path)):
        ref = r["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        out.append(SuiteRow(f"test-{i}", r["question"], ref))
    return out


def _math500_rows(path: Path) -> list[SuiteRow]:
    return [SuiteRow(r["unique_id"], r["problem"], r["answer"]) for r in _read_jsonl_gz(path)]


def _svamp_rows(path: Path) -> list[SuiteRow]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    rows = []
    for r in data:
        answer = float(r["Answer"])
        ref = str(int(answer)) if answer.is_integer() else str(answer)
        rows.append(SuiteRow(r["ID"], f"{r['Body'].strip()} {r['Question'].strip()}", ref))
    return rows


SUITES: dict[str, Suite] = {
    "gsm8k": Suite("gsm8k", "GSM8K test (1,319 grade-school word problems)", "test.jsonl.gz",
                   "github.com/openai/grade-school-math (MIT)", NUMERIC_PROMPT, _gsm8k_rows, "gsm8k"),
    "math500": Suite("math500", "MATH-500 (500 competition problems, Lightman et al. 2023)", "test.jsonl.gz",
                     "github.com/openai/prm800k (MIT)", BOXED_PROMPT, _math500_rows, "boxed"),
    "svamp": Suite("svamp", "SVAMP (1,000 varied arithmetic word problems)", "SVAMP.json.gz",
                   "github.com/arkilpatel/SVAMP (MIT)", NUMERIC_PROMPT, _svamp_rows, "gsm8k"),
}


# Suites the field reports that grpo does not ship, and why; a local file (eval.suite_files) stands in for
# the boxed-answer ones.
NOT_SHIPPED = {
    "aime24": "AIME 2024's problems belong to the MAA and carry no open licence",
    "aime25": "AIME 2025's problems belong to the MAA and carry no open licence",
    "gpqadiamond": "GPQA's authors ask that its questions not be redistributed in plain text; it is multiple "
                   "choice, scored by lighteval (`lighteval ... gpqa:diamond`), not by a boxed answer",
    "livecodebench": "LiveCodeBench problems are scraped from contest sites; code is scored by running tests "
                     "(lighteval's lcb tasks), not by a boxed answer",
}


LIGHTEVAL_OFFLINE = (
    "lighteval 0.13.0 (the current release) cannot evaluate offline, not even a local task file: building its "
    "task registry imports every built-in task, and at import tiny_benchmarks downloads tinyBenchmarks.pkl from "
    "raw.githubusercontent.com and mt_bench queries the Hub (HfApi.list_models(model_name=...), a keyword "
    "huggingface_hub 2.x no longer takes); it also pins latex2sympy2_extended==1.0.6, which breaks math-verify")
"""Why `lighteval:` suites are refused (measured in docs/migration.md)."""


def _file_rows(path: Path) -> list[SuiteRow]:
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


def file_suite(name: str, path: Path) -> Suite:
    """A suite read from a local file: zero-shot, the answer in the last \\boxed{} (as math500)."""

    def read(_: Path) -> list[SuiteRow]:
        return _file_rows(path)

    return Suite(name, f"{name} (local file {path.name})", str(path), str(path), BOXED_PROMPT, read, "boxed")


def get_suite(name: str, where: str = "--suite", files: dict[str, Path] | None = None) -> Suite:
    """The suite called `name` (bundled, or a local file from `files`), or a clear error saying what there is."""
    key = name.lower().replace("-", "").replace("_", "")
    if files and name in files:
        if not files[name].is_file():
            raise GrpoError(f"suite file {files[name]} not found", where=f"eval.suite_files.{name}",
                            fix="Paths are relative to the recipe's directory.")
        return file_suite(name, files[name])
    if name.lower().startswith("lighteval:"):
        raise GrpoError(f"{name}: grpo does not run lighteval suites. {LIGHTEVAL_OFFLINE}", where=where,
                        fix=f"Give the suite as a local JSONL of problem/answer rows (`eval.suite_files: "
                            f"{{{name.split(':', 1)[1] or 'NAME'}: FILE}}`, boxed answers), or run lighteval "
                            "yourself on the saved model directory where it has network.")
    suite = SUITES.get(key)
    if suite is None and key in NOT_SHIPPED:
        raise GrpoError(f"{name} is not shipped with grpo: {NOT_SHIPPED[key]}", where=where,
                        fix=f"Give your own copy as a JSONL of problem/answer rows: `eval.suite_files: {{{name}: "
                            f"FILE}}` (boxed answers), or evaluate the saved model with lighteval where it has "
                            "network.")
    if suite is None:
        raise GrpoError(f"there is no benchmark suite {name!r}", where=where,
                        fix=f"Use one of {', '.join(SUITES)}, or a local file (eval.suite_files).")
    return suite


def recipe_suite_files(recipe: Recipe) -> dict[str, Path]:
    """The recipe's eval.suite_files, resolved against the recipe's directory."""
    if recipe is None:
        return {}
    return {name: recipe.resolve_path(p) for name, p in recipe.eval.suite_files.items()}


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion: sensible at 0, 1 and small n, unlike p +- 1.96 se."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return (lo, hi)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct of n samples (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
