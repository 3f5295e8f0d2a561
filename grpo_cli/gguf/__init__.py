"""GGUF files (llama.cpp, Ollama) as model sources: the header read without dequantising (source.py), and the
converted-model cache every load goes through (cache.py). Its names load on first use, so a package that only
asks whether a reference is a GGUF file (paths.py) loads nothing of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.gguf.cache import cached_conversion, conversion_record, materialize
    from grpo_cli.gguf.source import GgufInfo, read_header

__all__ = ["GgufInfo", "cached_conversion", "conversion_record", "materialize", "read_header"]

__getattr__ = lazy_exports(__name__)
