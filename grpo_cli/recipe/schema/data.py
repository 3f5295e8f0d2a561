"""The `data` section: where rows come from and how each becomes a prompt."""

from __future__ import annotations

import re
import string
from typing import Literal

from pydantic import Field, field_validator, model_validator

from grpo_cli.recipe.schema.common import Section

LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
VLM_TRUNCATION_REASON = (
    "prompt_overflow: truncate cannot be used with images: cutting a prompt can cut through its image tokens, "
    "and a vision-language model then fails (or trains on a mismatch between image tokens and image features); "
    "use `prompt_overflow: filter` (the default) so over-long rows are dropped, never truncated")


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


class DataSection(Section):
    """Training (and eval) data: a hub dataset or local files, mapped to prompts plus reward columns."""

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
    eval_holdout: float = Field(0.0, ge=0.0, lt=1.0)
    """Fraction of the training rows held out for evaluation when there is no eval split."""
    prompt: PromptSection
    """How each row becomes a prompt."""
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
    seed: int = 42
    """Seed for shuffling and the holdout split."""
    max_samples: int | None = Field(None, gt=0)
    """Use at most this many training rows."""
    max_eval_samples: int | None = Field(None, gt=0)
    """Use at most this many eval rows."""

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
                raise ValueError(f"{p!r} is not a supported data file: use one of {', '.join(LOCAL_SUFFIXES)}")
        return value

    @model_validator(mode="after")
    def _source(self) -> DataSection:
        if self.files is not None and (not self.files or any(not v for v in self.file_map.values())):
            raise ValueError("`files` is empty: give at least one .jsonl/.json/.csv/.parquet file per split")
        if (self.dataset is None) == (self.files is None):
            raise ValueError("give exactly one data source: `dataset` (a hub id) or `files` (local files)")
        if self.images is not None and not self.prompt.chat:
            raise ValueError("image rows need chat prompts (`prompt.chat: true`): TRL inserts the image "
                             "placeholders into the user message and applies the processor's chat template")
        if self.images is not None and self.prompt_overflow == "truncate":
            raise ValueError(VLM_TRUNCATION_REASON)
        if self.eval_split and self.eval_holdout:
            raise ValueError("give `eval_split` or `eval_holdout`, not both")
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

    @property
    def has_eval(self) -> bool:
        return bool(self.eval_split or self.eval_holdout)
