"""A model directory of the source's machine (`/mnt/.../Qwen2.5-7B-Instruct`) whose name is, exactly, the name of a
well-known hub model: the finishing command can name that model instead of a placeholder, saying what it assumes
(that the directory held those weights, as downloaded). Only names listed here, each a published repository of its
organisation; any other name stays a placeholder."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

HUB_NAMES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(pattern), org) for pattern, org in (
    (r"Qwen2\.5-(0\.5|1\.5|3|7|14|32|72)B(-Instruct)?", "Qwen"),
    (r"Qwen2\.5-Math-(1\.5|7|72)B(-Instruct)?", "Qwen"),
    (r"Qwen2\.5-Coder-(0\.5|1\.5|3|7|14|32)B(-Instruct)?", "Qwen"),
    (r"Qwen3-(0\.6|1\.7|4|8|14)B(-Base)?|Qwen3-32B", "Qwen"),  # no Qwen3-32B-Base was published
    (r"DeepSeek-R1-Distill-(Qwen-(1\.5|7|14|32)B|Llama-(8|70)B)", "deepseek-ai"),
    (r"Llama-3\.1-(8|70)B(-Instruct)?|Llama-3\.2-(1|3)B(-Instruct)?", "meta-llama"),
))


def hub_model(path: str) -> str | None:
    """`org/NAME` when the directory's last component is NAME, a hub model of the table; None otherwise."""
    name = PurePosixPath(path.rstrip("/")).name
    for pattern, org in HUB_NAMES:
        if pattern.fullmatch(name):
            return f"{org}/{name}"
    return None
