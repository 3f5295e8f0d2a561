"""What the planning tests share: a rates file of each test's own, so no test plans from another's runs or from
the user's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def rates_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A per-machine rates file of the test's own, empty at the start."""
    path = tmp_path / "rates.json"
    monkeypatch.setenv("GRPO_RATES_FILE", str(path))
    return path
