"""grpo's version, in a module of its own: the CLI's `--version` and the cluster launcher's pip line read it
without going through the root face (whose lazy names reach `training`). Kept equal to pyproject.toml's."""

from __future__ import annotations

__version__ = "0.1.0"
