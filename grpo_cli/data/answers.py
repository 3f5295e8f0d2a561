"""The reference answer inside a solution cell (`data.answer.extract`), shared by the mapping and the filters."""

from __future__ import annotations

import re
from typing import Any

_GSM8K = re.compile(r"####\s*([-+]?[\d,]*\.?\d+)")


def extract_reference_answer(text: Any, kind: str, pattern: str | None = None) -> Any:
    """The reference answer inside a solution text (None when it cannot be found).

    With `extract: none` a structured cell (a dict or list, e.g. a column of test cases) is passed on as the
    structure it is: its Python repr is not a test script, nor JSON, and a reward must not be handed one.
    """
    if text is None:
        return None
    if kind == "none":
        return text if isinstance(text, dict | list) else str(text)
    if isinstance(text, dict | list):
        return None  # no answer text to search in a structure
    text = str(text)
    if kind == "gsm8k":
        found = _GSM8K.findall(text)
        return found[-1].replace(",", "").lstrip("+") if found else None
    if kind == "boxed":
        start = text.rfind("\\boxed{")
        if start < 0:
            return None
        depth, i = 0, start + len("\\boxed{") - 1
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1:j].strip()
        return None
    match = re.search(pattern or "", text)
    if not match:
        return None
    return (match.group(1) if match.groups() else match.group(0)).strip()
