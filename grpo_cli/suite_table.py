"""Benchmark suites: every fact about a `--suite` / `eval.suite` name, in one table that every module asks.

A row says what the suite is called, where its rows come from (a bundled file and the `module:function` that
reads it, resolved only when a suite runs), the zero-shot prompt, how answers are scored, its licence, whether
grpo scores it offline, and the Hub dataset a model card cites for it. Suites grpo knows of but does not ship
are rows too, with the reason, so a user asking for one is told why and what to do instead.

The recipe schema, `grpo eval`'s help, the model card, the evaluation code, the docs' check and the tests read
this table, which is why it is plain data at the bottom of the package: importing it loads nothing. A new
suite is one row here plus its data in `assets/benchmarks/<name>/` (docs/architecture.md, "Where things go").
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Scorer = Literal["number", "boxed"]
"""`number`: the number after the last `####`, else the last number, compared as numbers; `boxed`: the last
\\boxed{} compared as normalised strings, numbers, then math-verify."""

NUMERIC_PROMPT = ("Solve the following math word problem. Think step by step, then write the final answer as a "
                  "number on the last line in the form \"#### <answer>\".\n\n{question}")
BOXED_PROMPT = ("Solve the following math problem. Think step by step, then put your final answer within "
                "\\boxed{{}}.\n\n{question}")


class HubDataset(NamedTuple):
    """What a model card's model-index names as the suite's dataset."""

    id: str
    name: str
    split: str


class SuiteSpec(NamedTuple):
    """One row: a suite's name, its rows, prompt and scorer, licence, and whether grpo runs it offline.

    A NamedTuple rather than a dataclass: `grpo validate` imports this table (for a recipe that names a suite),
    and a tuple class is built in a fifth of the time."""

    name: str
    title: str
    licence: str
    """The data's licence and where it comes from (a row grpo cannot ship says why here)."""
    loader: str | None = None
    """`module:function` reading the bundled file into rows; None: grpo does not ship the suite."""
    file: str = ""
    """The bundled file, in `assets/benchmarks/<name>/`."""
    prompt: str = BOXED_PROMPT
    """The zero-shot prompt, one user turn with `{question}` filled in; it asks for the scorer's answer format."""
    scorer: Scorer = "boxed"
    hub: HubDataset | None = None
    offline: bool = True
    """grpo scores it without the network (False: a harness that needs it, such as lighteval's tasks)."""

    @property
    def shipped(self) -> bool:
        return self.loader is not None


_READERS = "grpo_cli.evaluation.suites"

SUITES: dict[str, SuiteSpec] = {s.name: s for s in (
    SuiteSpec("gsm8k", "GSM8K test (1,319 grade-school word problems)", "MIT (github.com/openai/grade-school-math)",
              loader=f"{_READERS}:gsm8k_rows", file="test.jsonl.gz", prompt=NUMERIC_PROMPT, scorer="number",
              hub=HubDataset("openai/gsm8k", "GSM8K", "test")),
    SuiteSpec("math500", "MATH-500 (500 competition problems, Lightman et al. 2023)", "MIT (github.com/openai/prm800k)",
              loader=f"{_READERS}:math500_rows", file="test.jsonl.gz", prompt=BOXED_PROMPT, scorer="boxed",
              hub=HubDataset("HuggingFaceH4/MATH-500", "MATH-500", "test")),
    SuiteSpec("svamp", "SVAMP (1,000 varied arithmetic word problems)", "MIT (github.com/arkilpatel/SVAMP)",
              loader=f"{_READERS}:svamp_rows", file="SVAMP.json.gz", prompt=NUMERIC_PROMPT, scorer="number",
              hub=HubDataset("ChilleD/SVAMP", "SVAMP", "test")),
    # Reported by the field, not shipped; a local file (eval.suite_files) stands in for the boxed-answer ones.
    SuiteSpec("aime24", "AIME 2024", "AIME 2024's problems belong to the MAA and carry no open licence"),
    SuiteSpec("aime25", "AIME 2025", "AIME 2025's problems belong to the MAA and carry no open licence"),
    SuiteSpec("gpqadiamond", "GPQA Diamond", "GPQA's authors ask that its questions not be redistributed in plain "
              "text; it is multiple choice, scored by lighteval (`lighteval ... gpqa:diamond`), not by a boxed "
              "answer", offline=False),
    SuiteSpec("livecodebench", "LiveCodeBench", "LiveCodeBench problems are scraped from contest sites; code is "
              "scored by running tests (lighteval's lcb tasks), not by a boxed answer", offline=False),
)}

LIGHTEVAL_OFFLINE = (
    "lighteval 0.13.0 (the current release) cannot evaluate offline, not even a local task file: building its "
    "task registry imports every built-in task, and at import tiny_benchmarks downloads tinyBenchmarks.pkl from "
    "raw.githubusercontent.com and mt_bench queries the Hub (HfApi.list_models(model_name=...), a keyword "
    "huggingface_hub 2.x no longer takes); it also pins latex2sympy2_extended==1.0.6, which breaks math-verify")
"""Why `lighteval:` suites are refused (measured in docs/migration.md)."""


def suite_key(name: str) -> str:
    """The one normalisation of a suite name: `GSM-8K`, `gsm_8k` and `gsm8k` are the same suite."""
    return name.lower().replace("-", "").replace("_", "")


def bundled() -> list[str]:
    """The suites grpo ships, in table order (for help texts and messages that list them)."""
    return [s.name for s in SUITES.values() if s.shipped]


def bundled_text(last: str = " or ") -> str:
    """`gsm8k, math500 or svamp` (`last=", "`: `gsm8k, math500, svamp`): the shipped names for a sentence."""
    names = bundled()
    return f"{', '.join(names[:-1])}{last}{names[-1]}" if len(names) > 1 else names[0]


class SuiteProblem(NamedTuple):
    """Why a suite name cannot run (what) and what to do instead (fix)."""

    what: str
    fix: str


def suite_problem(name: str, files: dict[str, object] | None = None) -> SuiteProblem | None:
    """None when `name` is a shipped suite or a name in `eval.suite_files`; else what is wrong and the fix.

    The schema (`eval.suite`, `eval.on_save`) and `grpo eval --suite` both ask this, so they refuse alike.
    """
    if files and name in files:
        return None
    if name.lower().startswith("lighteval:"):
        task = name.split(":", 1)[1] or "NAME"
        return SuiteProblem(f"{name}: grpo does not run lighteval suites. {LIGHTEVAL_OFFLINE}",
                            f"Give the suite as a local JSONL of problem/answer rows (`eval.suite_files: {{{task}: "
                            "FILE}`, boxed answers), or run lighteval yourself on the saved model directory where it "
                            "has network.")
    spec = SUITES.get(suite_key(name))
    if spec is not None and spec.shipped:
        return None
    if spec is not None:
        return SuiteProblem(f"{name} is not shipped with grpo: {spec.licence}",
                            f"Give your own copy as a JSONL of problem/answer rows: `eval.suite_files: {{{name}: "
                            "FILE}` (boxed answers), or evaluate the saved model with lighteval where it has "
                            "network.")
    from grpo_cli.errors import did_you_mean

    hint = did_you_mean(name, [*bundled(), *(files or {})])
    return SuiteProblem(f"there is no benchmark suite {name!r}" + (f"; did you mean {hint!r}?" if hint else ""),
                        f"Use one of {', '.join(bundled())}, or a local file (eval.suite_files).")
