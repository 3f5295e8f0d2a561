"""The `data` section: where rows come from and how each becomes a prompt."""

from __future__ import annotations

import re
import string
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from grpo_cli.recipe.schema.common import Section, not_a_bool

LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
VLM_TRUNCATION_REASON = (
    "prompt_overflow: truncate cannot be used with images: cutting a prompt can cut through its image tokens, "
    "and a vision-language model then fails (or trains on a mismatch between image tokens and image features); "
    "use `prompt_overflow: filter` (the default) so over-long rows are dropped, never truncated")


ENVIRONMENT_PROMPT: dict[str, Any] = {"template": "", "chat": True}
"""The prompt of environment-only rows: an empty user message, as TRL's placeholder dataset has."""


class PromptSection(Section):
    """How a row becomes the prompt the model sees."""

    column: str | None = None
    """Use this column as the prompt text (or, for chat data, as the list of messages)."""
    template: str | None = None
    """A Python format string over the row's columns, e.g. "Solve: {question}"."""
    chat: bool = False
    """Wrap the prompt as chat messages ([system], user) so the tokenizer's chat template is applied."""
    system_prompt: str | None = None
    """System message prepended to chat prompts (needs `chat: true`)."""

    @model_validator(mode="after")
    def _one_source(self) -> PromptSection:
        if (self.column is None) == (self.template is None):
            raise ValueError("give exactly one of `column` (a column holding the prompt) or `template`")
        if self.template is not None:
            try:
                list(string.Formatter().parse(self.template))
            except ValueError as exc:
                raise ValueError(f"template {self.template!r} is not a valid format string: {exc}") from None
        if self.system_prompt and not self.chat:
            raise ValueError("system_prompt needs `chat: true` (a plain-text prompt has no system message)")
        return self

    @property
    def columns(self) -> list[str]:
        """The columns the prompt reads."""
        if self.column is not None:
            return [self.column]
        fields = [f for _, f, _, _ in string.Formatter().parse(self.template or "") if f]
        return sorted({re.split(r"[.\[]", f, maxsplit=1)[0] for f in fields})


class AnswerSection(Section):
    """Extract the reference answer from a column (e.g. GSM8K's `#### 72`) into a clean column."""

    column: str = "answer"
    """Column holding the reference solution."""
    extract: Literal["none", "gsm8k", "boxed", "regex"] = "none"
    """none: keep as is; gsm8k: the number after `####` (thousands separators removed);
    boxed: the content of the last \\boxed{}; regex: the first group of `pattern`."""
    pattern: str | None = None
    """Regular expression for `extract: regex`; its first group (or the whole match) is the answer."""
    into: str = "answer"
    """Column the extracted answer is written to (rewards receive it under this name)."""

    @model_validator(mode="after")
    def _pattern(self) -> AnswerSection:
        if self.extract == "regex":
            if not self.pattern:
                raise ValueError("extract: regex needs `pattern`")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a valid regular expression: {exc}") from None
        elif self.pattern:
            raise ValueError(f"`pattern` is only used with `extract: regex` (extract is {self.extract!r})")
        return self


class ImagesSection(Section):
    """Images for a vision-language model: one column per row, passed to TRL as its `images` column."""

    column: str = "image"
    """Column holding each row's image(s): a file path, raw bytes, a `datasets.Image` value, or a list of
    these for several images per row. URLs are not fetched: download them with your own loader first."""
    relative_to: Literal["data_file", "recipe"] = "data_file"
    """What relative image paths are relative to: the data file's folder, or the recipe's folder
    (hub datasets always use the recipe's folder)."""
    check_rows: int = Field(4, ge=0)
    """`grpo validate` opens the images of this many first rows (local files) and reports their sizes."""
    max_pixels: int | None = Field(64_000_000, gt=0)
    """Largest image (width x height) accepted; default 64 megapixels (8000x8000). Every image's header is read
    when the data is mapped, and a larger one is refused by file and line before training starts, rather than
    decoded into gigabytes (PIL's own decompression-bomb guard). null: no limit."""


class RowFilter(Section):
    """One condition a row must meet to be kept; give a `column` with one test, or a row-level test."""

    column: str | None = None
    """The column the test reads (after `data.columns`)."""
    equals: Any = None
    """Keep rows whose value equals this."""
    one_of: list[Any] | None = None
    """Keep rows whose value is one of these."""
    min: float | None = None
    """Keep rows whose (numeric) value is at least this."""
    max: float | None = None
    """Keep rows whose (numeric) value is at most this."""
    max_length: int | None = Field(None, ge=0)
    """Keep rows whose value (text or list) has at most this many characters / items."""
    not_empty: bool = False
    """Keep rows whose value is present and not empty."""
    answer_parses: bool = False
    """Row-level: keep rows whose `data.answer` extraction finds an answer."""
    max_image_pixels: int | None = Field(None, gt=0)
    """Row-level: keep rows whose every image has at most this many pixels (width x height; needs `data.images`)."""

    @model_validator(mode="after")
    def _one_test(self) -> RowFilter:
        column_tests = [k for k in ("equals", "one_of", "min", "max", "max_length") if getattr(self, k) is not None]
        column_tests += ["not_empty"] if self.not_empty else []
        row_tests = [k for k in ("answer_parses", "max_image_pixels") if getattr(self, k)]
        if len(column_tests) + len(row_tests) != 1:
            raise ValueError("give exactly one test per filter (equals, one_of, min, max, max_length, not_empty, "
                             "answer_parses or max_image_pixels); list several filters to combine them")
        if column_tests and self.column is None:
            raise ValueError(f"`{column_tests[0]}` tests a column: add `column:`")
        if row_tests and self.column is not None:
            raise ValueError(f"`{row_tests[0]}` tests the whole row: drop `column:`")
        return self

    def describe(self) -> str:
        for key in ("equals", "one_of", "min", "max", "max_length", "max_image_pixels"):
            if getattr(self, key) is not None:
                return f"{self.column or 'images'} {key} {getattr(self, key)!r}"
        return f"{self.column} not_empty" if self.not_empty else "answer_parses"


_INTERVAL = re.compile(r"^\s*([\[(])\s*([0-9.eE+-]+)\s*,\s*([0-9.eE+-]+)\s*([\])])\s*$")


def parse_pass_range(text: str) -> tuple[float, float, bool, bool]:
    """(low, high, low included, high included) of an interval like "(0, 1)" or "[0.1, 0.9]"; ValueError with the
    reason when it is not one (`grpo calibrate --range` and `data.pass_rate.range` read the same notation)."""
    match = _INTERVAL.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an interval: write it as (LOW, HIGH) to leave the ends out or [LOW, HIGH] "
                         "to keep them, e.g. \"(0, 1)\" (some but not all completions pass) or \"[0.1, 0.9]\"")
    try:
        low, high = float(match[2]), float(match[3])
    except ValueError:
        raise ValueError(f"{text!r}: {match[2]!r} or {match[3]!r} is not a number") from None
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"{text!r}: pass rates run from 0 to 1, so give 0 <= LOW <= HIGH <= 1")
    if low == high and (match[1] == "(" or match[4] == ")"):
        raise ValueError(f"{text!r} holds no pass rate at all; widen it or close both ends ([{low:g}, {high:g}])")
    return low, high, match[1] == "[", match[4] == "]"


class PassRateFilter(Section):
    """Keep the training rows whose pass rate, measured by `grpo calibrate` with the base model, is in a range.

    A prompt the base model always solves, or never does, gives groups whose completions all get the same reward:
    zero advantage, no learning signal. `grpo calibrate RECIPE` samples k completions per training prompt, scores
    them, and writes `calibration.jsonl` (each prompt's pass rate); this filter reads it. Rows are matched by the
    prompt as the model sees it, after the rest of `data` (so the filter applies to exactly the rows calibrate
    measured; `max_samples` counts before it). `grpo validate` prints how many rows remain.
    """

    file: str
    """`calibration.jsonl` written by `grpo calibrate` (relative to the recipe, or absolute)."""
    range: str = "(0, 1)"
    """The pass rates kept, as an interval: `(0, 1)` drops prompts no completion passed and prompts every one
    passed; `[0.1, 0.9]` keeps the ends (a YAML list `[0.1, 0.9]` means the same); `(0, 1]` keeps the solved
    ones too."""
    keep_uncalibrated: bool = False
    """Keep rows calibrate did not measure (e.g. after `grpo calibrate --max-prompts`); by default they are
    dropped, so training sees only measured rows."""

    @field_validator("range", mode="before")
    @classmethod
    def _closed_list(cls, value: Any) -> Any:
        """`range: [0.1, 0.9]` (YAML's list, also what `data.pass_rate.range=[0.1,0.9]` becomes) is the closed
        interval."""
        if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
            return f"[{value[0]}, {value[1]}]"
        return value

    @field_validator("range")
    @classmethod
    def _interval(cls, value: str) -> str:
        parse_pass_range(value)
        return value

    def keeps(self, rate: float) -> bool:
        """Whether a prompt with this pass rate is trained on."""
        low, high, with_low, with_high = parse_pass_range(self.range)
        return (low < rate or (with_low and rate == low)) and (rate < high or (with_high and rate == high))


class ColumnValue(Section):
    """A constant column: every row gets `value`."""

    value: Any
    """The value (text, number, list or mapping)."""


class DataSection(Section):
    """Training (and eval) data: a hub dataset or local files, mapped to prompts plus reward columns."""

    from_environment: bool = False
    """No rows: the `environment` serves every prompt from its `reset()` (TRL's environment-only training; each
    prompt starts as an empty user message, as TRL's own placeholder rows do, or as `prompt.template`'s constant
    text). Set for you when a recipe has `environment:` and no `data:`; it needs `training.max_steps`, as TRL
    does."""
    dataset: str | None = None
    """Hub dataset id, e.g. openai/gsm8k."""
    config: str | None = None
    """Hub dataset config name, e.g. main."""
    split: str = "train"
    """Training split (for local files: the key in `files`)."""
    files: str | list[str] | dict[str, str | list[str]] | None = None
    """Local .jsonl/.json/.csv/.parquet files, relative to the recipe: one path, a list (train), or a
    mapping split -> path(s). `bundled:tiny-arith-data/train.jsonl` names data shipped with grpo."""
    eval_split: str | None = None
    """Split used for evaluation during and after training."""
    eval_holdout: float = Field(0.0, ge=0.0)
    """Training rows held out for evaluation when there is no eval split: a fraction below 1 (0.05), or a whole
    number of rows (500), as open-r1 and Axolotl configs give it."""
    columns: dict[str, str | ColumnValue] = Field(default_factory=dict)
    """Columns derived on load, before anything reads them: `new: old` renames (copies) a column, `new: a.b.c`
    takes a field of a dict column (a number picks a list item), `new: {value: X}` is a constant. E.g.
    `{tests: verification_info.test_cases, language: {value: python}}`, so the code reward reads `tests`
    without a shim file."""
    filter: list[RowFilter] = []
    """Conditions a row must meet to be trained (or evaluated) on, all of them; applied after `columns`,
    before `max_samples` counts rows. How many rows each dropped is printed."""
    prompt: PromptSection
    """How each row becomes a prompt."""
    pass_rate: PassRateFilter | None = None
    """Keep only training rows whose base-model pass rate (measured by `grpo calibrate`) is in a range; eval rows
    are never filtered."""
    answer: AnswerSection | None = None
    """Reference-answer extraction for accuracy-style rewards."""
    images: ImagesSection | None = None
    """Image column for vision-language training; the chat prompt gets one image placeholder per image."""
    keep_columns: list[str] | None = None
    """Columns passed to reward functions; all columns when absent."""
    max_prompt_tokens: int | None = Field(None, gt=0)
    """Longest prompt in tokens (TRL 1.16 no longer has `max_prompt_length`)."""
    prompt_overflow: Literal["filter", "truncate"] = "filter"
    """What to do with longer prompts: drop the row, or keep its last max_prompt_tokens tokens."""
    shuffle: bool = True
    """Shuffle the rows once (deterministically, with `seed`) before max_samples is applied."""
    seed: int = Field(42, ge=0, le=2**32 - 1)
    """Seed for shuffling and the holdout split."""
    max_samples: int | None = Field(None, gt=0)
    """Use at most this many training rows."""
    max_eval_samples: int | None = Field(None, gt=0)
    """Use at most this many eval rows."""

    @field_validator("max_prompt_tokens", "max_samples", "max_eval_samples", mode="before")
    @classmethod
    def _counts(cls, value: object) -> object:
        """`true` is not a count (pydantic would read it as 1: one-token prompts, one row)."""
        return not_a_bool(value, "a whole number > 0")

    @field_validator("files", mode="before")
    @classmethod
    def _files_suffix(cls, value: object) -> object:
        paths: list[str] = []
        if isinstance(value, str):
            paths = [value]
        elif isinstance(value, list):
            paths = [v for v in value if isinstance(v, str)]
        elif isinstance(value, dict):
            for v in value.values():
                paths += [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)]
        for p in paths:
            if not p.endswith(LOCAL_SUFFIXES):
                raise ValueError(f"{p!r} is not a supported data file: use one of {', '.join(LOCAL_SUFFIXES)} "
                                 f"(for a directory of files, list them, e.g. {p.rstrip('/')}/train.jsonl)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _environment_prompt(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("from_environment") is True and "prompt" not in value:
            return {**value, "prompt": dict(ENVIRONMENT_PROMPT)}
        return value

    @model_validator(mode="after")
    def _source(self) -> DataSection:
        if self.from_environment:
            return self._environment_only()
        if self.files is not None and (not self.files or any(not v for v in self.file_map.values())):
            raise ValueError("`files` is empty: give at least one .jsonl/.json/.csv/.parquet file per split")
        if (self.dataset is None) == (self.files is None):
            raise ValueError("give exactly one data source: `dataset` (a hub id) or `files` (local files)")
        if self.images is not None and not self.prompt.chat:
            raise ValueError("image rows need chat prompts (`prompt.chat: true`): TRL inserts the image "
                             "placeholders into the user message and applies the processor's chat template")
        if self.images is not None and self.prompt_overflow == "truncate":
            raise ValueError(VLM_TRUNCATION_REASON)
        for name, spec in self.columns.items():
            if not name or (isinstance(spec, str) and not all(spec.split("."))):
                raise ValueError(f"columns.{name}: {spec!r} is not a column or a dotted path like `info.tests`")
        if any(f.max_image_pixels for f in self.filter) and self.images is None:
            raise ValueError("filter `max_image_pixels` needs `images` (the column of the row's images)")
        if any(f.answer_parses for f in self.filter) and self.answer is None:
            raise ValueError("filter `answer_parses` needs `answer` (the extraction whose result it tests)")
        if self.eval_holdout >= 1 and not float(self.eval_holdout).is_integer():
            raise ValueError(f"eval_holdout {self.eval_holdout} is neither a fraction below 1 nor a number of rows")
        if self.eval_split and self.eval_holdout:
            raise ValueError("give `eval_split` or `eval_holdout`, not both")
        return self

    def _environment_only(self) -> DataSection:
        """`from_environment` rows carry nothing: every key that reads or shapes rows is a mistake here."""
        used = [k for k in ("dataset", "files", "eval_split", "answer", "images", "keep_columns", "max_samples",
                            "max_eval_samples", "max_prompt_tokens") if getattr(self, k) is not None]
        used += [k for k in ("columns", "filter", "pass_rate") if getattr(self, k)]
        used += ["eval_holdout"] if self.eval_holdout else []
        if used:
            raise ValueError(f"`from_environment: true` has no rows, so `{used[0]}` has nothing to read: the "
                             "environment's reset() gives each prompt. Drop it, or give rows (`files`/`dataset`) "
                             "and drop `from_environment`")
        if self.prompt.column is not None or self.prompt.columns or not self.prompt.chat:
            raise ValueError("`from_environment: true` has no columns to read: its prompt is a chat user message "
                             "(empty unless `prompt.template` gives constant text, optionally after a "
                             "`system_prompt`) that the environment's reset() appends to; drop `prompt.column` and "
                             "`{fields}`, keep `chat: true`")
        return self

    @property
    def file_map(self) -> dict[str, list[str]]:
        """Local files by split name (empty for hub datasets)."""
        if self.files is None:
            return {}
        if isinstance(self.files, str):
            return {self.split: [self.files]}
        if isinstance(self.files, list):
            return {self.split: list(self.files)}
        return {k: [v] if isinstance(v, str) else list(v) for k, v in self.files.items()}

    def describe_prompt(self) -> str:
        """Where each prompt comes from, for validate's plan."""
        if self.from_environment:
            text = (self.prompt.template or "").format()
            return ("each rollout's environment reset(), appended to " + (f"{text!r}" if text else "an empty user "
                    "message") + (" after the system prompt" if self.prompt.system_prompt else ""))
        source = f"column {self.prompt.column!r}" if self.prompt.column else f"template {self.prompt.template!r}"
        return source + (" as chat messages" if self.prompt.chat else " as plain text")

    @property
    def has_eval(self) -> bool:
        return bool(self.eval_split or self.eval_holdout)
