"""Turn the recipe's data section into TRL rows: `prompt` (text or chat messages) plus reward columns.

Also enforces the prompt-length limit (TRL 1.16 dropped `max_prompt_length`) and reports
how many rows were dropped or cut, so users see what their data became.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.data.answers import extract_reference_answer
from grpo_cli.data.derive import derive_columns
from grpo_cli.data.environment_rows import environment_rows
from grpo_cli.data.filters import filter_rows
from grpo_cli.data.images import IMAGES, attach_images, image_sizes, image_token_counts, is_processor
from grpo_cli.data.pass_rate import keep_in_range
from grpo_cli.data.peek import locate_record, scan_file
from grpo_cli.errors import GrpoError
from grpo_cli.paths import go_offline, hub_unreachable
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.schema.data import DataSection


@dataclass
class MappedData:
    """Train/eval datasets in TRL's format and what happened to the rows on the way."""

    train: Any
    eval: Any | None
    stats: dict[str, Any] = field(default_factory=dict)
    train_sources: list[int] = field(default_factory=list, repr=False)
    """Each training row's position in its file(s) before shuffling and filtering (for `locate_train`)."""
    locate: Any = None
    """source position -> 'FILE line N' (or 'row N of split S' for hub data)."""

    def locate_train(self, index: int) -> str:
        """Where training row `index` (after shuffling) comes from, as data errors name it: 'train.jsonl line 4'."""
        if self.locate is None or not 0 <= index < len(self.train_sources):
            return f"row {index}"
        return str(self.locate(self.train_sources[index]))


SOURCE_INDEX = "__grpo_source_row__"
"""A column added on load: the row's position in its split before shuffling, so errors can name file and line."""

_LOAD_FIX = {".jsonl": "Each line of a .jsonl file must be one JSON object.",
             ".json": "A .json data file holds one list of objects.",
             ".csv": "Every CSV row needs as many fields as the header; quote values that contain commas.",
             ".parquet": "Write the parquet file again."}


def _local_paths(data: DataSection, recipe: Recipe, split: str) -> list[Path]:
    return [recipe.resolve_path(p) for p in data.file_map.get(split, [])]


def _load_split(data: DataSection, recipe: Recipe, split: str, where: str, derive: bool = True) -> Any:
    import datasets

    offline = hub_unreachable() if data.dataset else None
    if offline:
        go_offline()  # the local datasets cache only, without a minute of retries
    try:
        if data.dataset:
            ds = datasets.load_dataset(data.dataset, data.config, split=split)
        else:
            paths = [str(p) for p in _local_paths(data, recipe, split)]
            builder = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}[
                "." + paths[0].rsplit(".", 1)[-1]]
            with _quiet_loader():  # a broken file is reported below, with its line, not as pyarrow's log
                ds = datasets.load_dataset(builder, data_files={split: paths}, split=split)
    except FileNotFoundError as exc:
        raise GrpoError(f"cannot load the data: {exc}", where=where,
                        fix="Check the path, or the hub id and network access (offline: use `data.files`).") from None
    except Exception as exc:  # datasets raises many private error types (DatasetGenerationError, ...)
        if not data.dataset:
            raise _local_load_error(data, recipe, split, where, exc) from None
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        network = f" (there is no network here: {offline}, so only the local cache was read)" if offline else ""
        raise GrpoError(f"cannot load split {split!r} of {data.dataset}{network}: {type(exc).__name__}: {first}",
                        where=where, fix="Check the dataset id, config and split names; "
                                         "without network use local `data.files`.") from None
    if not derive:
        return ds

    return derive_columns(ds, data, split).add_column(SOURCE_INDEX, range(len(ds)))


def source_rows(recipe: Recipe) -> Any:
    """The training split as stored (no derived columns, filters or mapping): `MappedData.train_sources` index it,
    so a subset of training rows can be written back in the data's own columns (`grpo calibrate`)."""
    return _load_split(recipe.data, recipe, recipe.data.split, "data", derive=False)


@contextmanager
def _quiet_loader() -> Iterator[None]:
    logger = logging.getLogger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _local_load_error(data: DataSection, recipe: Recipe, split: str, where: str, exc: Exception) -> GrpoError:
    """The broken record (file and line) when a full scan finds it, else the loader's own first line."""
    paths = _local_paths(data, recipe, split)
    for path in paths:
        try:
            scan_file(path)
        except GrpoError as found:
            return GrpoError(found.problems[0].what, where=f"{where} ({split})", fix=found.problems[0].fix)
    cause = exc.__cause__ or exc.__context__ or exc
    first = (str(cause).splitlines() or [type(cause).__name__])[0]
    names = ", ".join(str(p) for p in paths)
    return GrpoError(f"cannot load {names}: {type(cause).__name__}: {first}", where=f"{where} ({split})",
                     fix=_LOAD_FIX.get(paths[0].suffix if paths else "", "Check that the file is well-formed."))


def _locator(recipe: Recipe, data: DataSection, split: str) -> Any:
    """index -> 'FILE line N' (local files) or 'row N of split S' (hub), for messages about one row."""
    if data.dataset:
        return lambda index: f"row {index} of {data.dataset} split {split!r} (before shuffling)"
    paths = _local_paths(data, recipe, split)
    return lambda index: locate_record(paths, index)


def _row_namer(locate: Any) -> Any:
    """(row, index) -> the row's file and line, for messages about its images (the index is after shuffling)."""
    return lambda row, i: locate(row[SOURCE_INDEX]) if SOURCE_INDEX in row else f"row {i}"


def _row_mapper(data: DataSection, locate: Any) -> Any:
    prompt = data.prompt
    answer = data.answer

    def to_row(row: dict[str, Any]) -> dict[str, Any]:
        if prompt.column is not None:
            value = row[prompt.column]
        else:
            try:
                value = (prompt.template or "").format(**row)
            except (KeyError, IndexError, ValueError) as exc:
                raise GrpoError(f"{locate(row[SOURCE_INDEX])}: the template cannot be filled "
                                f"({type(exc).__name__}: {exc})", where="data.prompt.template") from None
        if prompt.chat:
            messages = list(value) if isinstance(value, list) else [{"role": "user", "content": str(value)}]
            if prompt.system_prompt and not (messages and messages[0].get("role") == "system"):
                messages = [{"role": "system", "content": prompt.system_prompt}, *messages]
            value = messages
        elif not isinstance(value, str):
            raise GrpoError(f"{locate(row[SOURCE_INDEX])}: the prompt is a {type(value).__name__}, not text",
                            where="data.prompt", fix="Set `chat: true` for message lists, or point to a text column.")
        out = {"prompt": value}
        if answer is not None:
            out[answer.into] = extract_reference_answer(row.get(answer.column), answer.extract, answer.pattern)
        return out

    return to_row


def _check_columns(ds: Any, data: DataSection, where: str) -> None:
    cols = [c for c in ds.column_names if c != SOURCE_INDEX]
    missing = [c for c in data.prompt.columns if c not in cols]
    if missing:
        key = "data.prompt.column" if data.prompt.column else "data.prompt.template"
        raise GrpoError(f"column(s) {', '.join(missing)} not in the {where} data", where=key,
                        fix=f"Available columns: {', '.join(cols)}.")
    if data.answer and data.answer.column not in cols:
        raise GrpoError(f"column {data.answer.column!r} not in the {where} data", where="data.answer.column",
                        fix=f"Available columns: {', '.join(cols)}.")
    if data.keep_columns:
        absent = [c for c in data.keep_columns if c not in cols and not (data.answer and c == data.answer.into)]
        if absent:
            raise GrpoError(f"column(s) {', '.join(absent)} not in the {where} data", where="data.keep_columns",
                            fix=f"Available columns: {', '.join(cols)}.")


def _map(ds: Any, data: DataSection, locate: Any, keep_source: bool = False) -> Any:
    keep = set(data.keep_columns) if data.keep_columns is not None else set(ds.column_names) - {SOURCE_INDEX}
    if keep_source:
        keep.add(SOURCE_INDEX)
    if data.answer:
        keep.add(data.answer.into)
    if data.images is not None:  # TRL's `images` column replaces the source column (unless kept on purpose)
        keep.add(IMAGES)
        if data.keep_columns is None or data.images.column not in data.keep_columns:
            keep.discard(data.images.column)
    mapped = ds.map(_row_mapper(data, locate), desc="mapping prompts")
    drop = [c for c in mapped.column_names if c != "prompt" and c not in keep]
    return mapped.remove_columns(drop) if drop else mapped


def prompt_token_length(prompt: Any, tokenizer: Any, image_sizes: list[tuple[int, int]] | None = None) -> int:
    """Tokens the model sees for a prompt (chat template applied for messages; image tokens counted)."""
    if is_processor(tokenizer):
        from trl.data_utils import prepare_multimodal_messages

        sizes = image_sizes or []
        messages = prepare_multimodal_messages(prompt, images=[None] * len(sizes))
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer.tokenizer(text, add_special_tokens=False)["input_ids"]
        # The template renders one placeholder token per image; the processor expands each into its image tokens.
        return len(ids) + sum(n - 1 for n in image_token_counts(tokenizer, sizes))
    if isinstance(prompt, list):
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)
    return len(tokenizer(prompt)["input_ids"])  # TRL tokenizes plain prompts with special tokens


def _truncate(prompt: Any, tokenizer: Any, limit: int) -> Any:
    """Keep the end of the prompt (for messages: of the last one) so it fits `limit` tokens."""
    if isinstance(prompt, list):
        overhead = prompt_token_length(prompt, tokenizer) - len(
            tokenizer(prompt[-1]["content"], add_special_tokens=False)["input_ids"])
        keep = max(1, limit - overhead)
        ids = tokenizer(prompt[-1]["content"], add_special_tokens=False)["input_ids"][-keep:]
        return [*prompt[:-1], {**prompt[-1], "content": tokenizer.decode(ids)}]
    special = len(tokenizer(prompt)["input_ids"]) - len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-max(1, limit - special):]
    return tokenizer.decode(ids)


def _limit_length(ds: Any, data: DataSection, tokenizer: Any, stats: dict[str, Any], prefix: str) -> Any:
    limit = data.max_prompt_tokens
    if not limit or tokenizer is None:
        return ds
    sizes = image_sizes(ds) if IMAGES in ds.column_names else [None] * len(ds)
    lengths = [prompt_token_length(p, tokenizer, z) for p, z in zip(ds["prompt"], sizes, strict=True)]
    long_rows = [i for i, n in enumerate(lengths) if n > limit]
    stats[f"{prefix}_longest_prompt_tokens"] = max(lengths, default=0)
    if not long_rows:
        return ds
    if data.prompt_overflow == "filter":
        stats[f"{prefix}_dropped_long"] = len(long_rows)
        bad = set(long_rows)
        return ds.select([i for i in range(len(ds)) if i not in bad])
    stats[f"{prefix}_truncated"] = len(long_rows)
    cut = set(long_rows)
    return ds.map(lambda row, i: {"prompt": _truncate(row["prompt"], tokenizer, limit)} if i in cut else {},
                  with_indices=True, desc="truncating prompts")


def map_split(recipe: Recipe, tokenizer: Any, split: str, *, data: DataSection | None = None,
              where: str = "data") -> Any:
    """One split through exactly the training mapping (columns checked, prompts built, length-limited).

    `data` replaces the recipe's data section (e.g. a copy pointing at another file) for evaluation.
    """
    data = data or recipe.data
    ds = _load_split(data, recipe, split, where)
    _check_columns(ds, data, where)
    ds = filter_rows(ds, data, {}, split)
    if data.images is not None:
        ds = filter_rows(attach_images(ds, recipe, data, split, _row_namer(_locator(recipe, data, split))), data, {},
                         split, images=True)
    return _limit_length(_map(ds, data, _locator(recipe, data, split)), data, tokenizer, {}, split)


def _check_chat_template(recipe: Recipe, tokenizer: Any) -> None:
    if recipe.data.prompt.chat and tokenizer is not None and not getattr(tokenizer, "chat_template", None):
        raise GrpoError("the prompts are chat messages (`data.prompt.chat: true`) but the tokenizer of "
                        f"{recipe.model.name_or_path} has no chat template", where="data.prompt.chat",
                        fix="Use an instruct/chat model, or set `chat: false` with a `template` "
                            "for plain-text prompts.")


def _map_train(train: Any, data: DataSection, recipe: Recipe, tokenizer: Any, locate: Any,
               stats: dict[str, Any]) -> tuple[Any, list[int]]:
    """The training rows mapped and length-limited, then `data.pass_rate` (after the mapping: rows are matched by
    the prompt the model sees); with each row's position in its split as stored."""
    train = _limit_length(_map(train, data, locate, keep_source=True), data, tokenizer, stats, "train")
    if data.pass_rate is not None:
        train = keep_in_range(train, data.pass_rate, recipe, stats)
    sources = list(train[SOURCE_INDEX])  # kept for messages only: TRL would pass it to rewards and reset()
    return train.remove_columns([SOURCE_INDEX]), sources


def prepare_data(recipe: Recipe, tokenizer: Any = None) -> MappedData:
    """Load, map, shuffle, limit and length-filter the recipe's train (and eval) data."""
    data = recipe.data
    _check_chat_template(recipe, tokenizer)
    if data.from_environment:
        return MappedData(*environment_rows(recipe))
    stats: dict[str, Any] = {}
    train = _load_split(data, recipe, data.split, "data")
    _check_columns(train, data, "training")
    evaluation = None
    if data.eval_split:
        evaluation = _load_split(data, recipe, data.eval_split, "data.eval_split")
        _check_columns(evaluation, data, "eval")
    stats["train_rows_loaded"] = len(train)
    train = filter_rows(train, data, stats, "train")
    if evaluation is not None:
        evaluation = filter_rows(evaluation, data, stats, "eval")
    if data.eval_holdout:
        size = data.eval_holdout if data.eval_holdout < 1 else int(data.eval_holdout)  # a count of rows
        if isinstance(size, int) and size >= len(train):
            raise GrpoError(f"data.eval_holdout holds out {size} rows, but the training data has {len(train)}",
                            where="data.eval_holdout", fix="Hold out fewer rows, or a fraction (e.g. 0.05).")
        parts = train.train_test_split(test_size=size, seed=data.seed, shuffle=True)
        train, evaluation = parts["train"], parts["test"]
    if data.shuffle:
        train = train.shuffle(seed=data.seed)
    if data.max_samples:
        train = train.select(range(min(data.max_samples, len(train))))
    if evaluation is not None and data.max_eval_samples:
        evaluation = evaluation.select(range(min(data.max_eval_samples, len(evaluation))))
    if data.images is not None:
        train = filter_rows(attach_images(train, recipe, data, data.split,
                                          _row_namer(_locator(recipe, data, data.split))), data, stats, "train",
                            images=True)
        if evaluation is not None:
            split = data.eval_split or data.split
            evaluation = filter_rows(attach_images(evaluation, recipe, data, split,
                                                   _row_namer(_locator(recipe, data, split))), data, stats, "eval",
                                     images=True)
    locate = _locator(recipe, data, data.split)
    train, sources = _map_train(train, data, recipe, tokenizer, locate, stats)
    if evaluation is not None:
        eval_locate = _locator(recipe, data, data.eval_split) if data.eval_split else locate
        evaluation = _limit_length(_map(evaluation, data, eval_locate), data, tokenizer, stats, "eval")
    if data.answer is not None:
        missing = sum(1 for a in train[data.answer.into] if a is None)
        if missing:
            stats["train_rows_without_answer"] = missing
    if len(train) == 0:
        raise GrpoError("no training rows are left after filtering", where="data",
                        fix="Raise `data.max_prompt_tokens`, use `prompt_overflow: truncate`, or check max_samples.")
    stats["train_rows"] = len(train)
    if evaluation is not None:
        stats["eval_rows"] = len(evaluation)
    return MappedData(train, evaluation, stats, sources, locate)
