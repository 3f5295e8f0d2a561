"""Data: cheap peeks for `grpo validate` (peek.py) and the full mapping to the rows TRL trains on (mapping.py).

Evaluation and check-rewards map rows through `prepare_data` / `map_split`, so every command sees the
prompts exactly as training does.
"""

from __future__ import annotations

from grpo_cli.data.mapping import MappedData, extract_reference_answer, map_split, prepare_data, prompt_token_length
from grpo_cli.data.peek import count_rows, peek_columns
from grpo_cli.recipe.schema.data import LOCAL_SUFFIXES

__all__ = [
    "LOCAL_SUFFIXES",
    "MappedData",
    "count_rows",
    "extract_reference_answer",
    "map_split",
    "peek_columns",
    "prepare_data",
    "prompt_token_length",
]
