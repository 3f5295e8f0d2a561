"""Data: cheap peeks for `grpo validate` (peek.py) and the full mapping to the rows TRL trains on (mapping.py).

Evaluation and check-rewards map rows through `prepare_data` / `map_split`, so every command sees the
prompts exactly as training does. The mapping loads on first use; the peeks are what validate needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.data.peek import count_rows, peek_columns
from grpo_cli.lazy import lazy_exports
from grpo_cli.recipe.schema.data import LOCAL_SUFFIXES

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.data.mapping import MappedData, extract_reference_answer, map_split, prepare_data, prompt_token_length

__all__ = [
    "LOCAL_SUFFIXES", "MappedData", "count_rows", "extract_reference_answer", "map_split", "peek_columns",
    "prepare_data", "prompt_token_length",
]

__getattr__ = lazy_exports(__name__)
