"""The TRL grpo was verified on, read in one place: the range CI tests, the installed version, and where
AsyncGRPOTrainer lives in it.

grpo replaces some of TRL's private methods (`training/hooks/`, one list); they were checked against TRL 1.16
only, so pyproject.toml accepts that range (`VERIFIED`, kept equal to it by a test). On another TRL the hooks are
gated at trainer build, and `grpo doctor` / `grpo validate` say so in one line (`untested_line`). Everything here
reads package metadata only: nothing of TRL is imported, so `grpo validate` stays instant.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers, TRL 1.16's home; at run time `async_classes` asks `async_home`
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

__all__ = ["ASYNC_STABLE", "VERIFIED", "VERIFIED_RANGE", "AsyncGRPOConfig", "AsyncGRPOTrainer", "async_classes",
           "async_config_source", "async_home", "installed", "is_verified", "release", "spec", "untested_line"]

Release = tuple[int, ...]
VERIFIED_RANGE: tuple[Release, Release] = ((1, 16), (1, 17))
"""The TRL releases grpo's hooks were verified on, from (inclusive) and below (exclusive): pyproject.toml's range
for TRL, which is what CI installs and tests."""


def spec(verified: tuple[Release, Release] = VERIFIED_RANGE) -> str:
    """A range as pip writes it: ((1, 16), (1, 17)) -> ">=1.16,<1.17"."""
    return f">={'.'.join(map(str, verified[0]))},<{'.'.join(map(str, verified[1]))}"


VERIFIED = spec()
ASYNC_STABLE: Release = (1, 18)
"""TRL 1.18 moved AsyncGRPOTrainer out of `trl.experimental.async_grpo` into `trl` (its release notes; the old
path still imports, with a FutureWarning, until TRL 2)."""


def installed() -> str | None:
    """The installed TRL's version, None when TRL is not installed: every check reads it here.

    Read from TRL's `.dist-info` directory name on sys.path (what importlib.metadata finds, without its 25 ms
    import on `grpo validate`'s path); importlib.metadata only when that finds nothing.
    """
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("trl-") and name.endswith(".dist-info"):
                return name[len("trl-"):-len(".dist-info")]
    import importlib.metadata

    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


def release(version: str) -> Release | None:
    """The release numbers of a version ("1.16.0rc1+local" -> (1, 16, 0)); None when it has none."""
    found = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def is_verified(version: str | None, verified: tuple[Release, Release] = VERIFIED_RANGE) -> bool:
    """Whether `version` lies in `verified` (`VERIFIED_RANGE` by default; a missing or unreadable version does not).

    As pip reads the range: a pre-release or dev build of the first verified release ("1.16.0rc1", "1.16.dev0")
    comes before it, so it is not verified."""
    found = release(version) if version else None
    if found is None or not verified[0] <= found < verified[1]:
        return False
    ahead = found + (0,) * max(0, len(verified[0]) - len(found))
    text = str(version).strip().split("+")[0]
    head = re.match(r"v?\d+(?:\.\d+)*", text)
    rest = text[head.end():] if head else ""
    early = re.match(r"[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)", rest)
    return not (early and ahead[:len(verified[0])] == verified[0] and not any(ahead[len(verified[0]):]))


def untested_line(version: str | None) -> str | None:
    """One warning line naming an installed TRL outside the verified range; None when it is inside (or absent)."""
    if version is None or is_verified(version):
        return None
    shown = version if release(version) else f"{version!r} (not a version number)"
    return (f"TRL {shown} is installed, but grpo's hooks into TRL were verified on trl{VERIFIED} only: at "
            f"`grpo train` an optimisation whose hook is unverified is skipped, a recipe feature that needs one is "
            f"refused (pip install 'trl{VERIFIED}' for the tested stack).")


def async_home(version: str | None = None) -> str:
    """The module to import AsyncGRPOConfig and AsyncGRPOTrainer from, for this TRL (the installed one by default)."""
    found = release(version or installed() or "0")
    return "trl" if found is not None and found >= ASYNC_STABLE else "trl.experimental.async_grpo"


def async_config_source(version: str | None = None) -> tuple[str, str]:
    """(file under TRL's package directory, class name) of AsyncGRPOConfig, for reading its fields from source
    (from 1.18 the stable trainer's two-file layout, as TRL's release notes describe it; not run here)."""
    if async_home(version) == "trl":
        return "trainer/async_grpo_config.py", "AsyncGRPOConfig"
    return "experimental/async_grpo/async_grpo_config.py", "AsyncGRPOConfig"


def async_classes() -> tuple[type[AsyncGRPOConfig], type[AsyncGRPOTrainer]]:
    """(AsyncGRPOConfig, AsyncGRPOTrainer) from where the installed TRL keeps them (imports TRL)."""
    import importlib

    module = importlib.import_module(async_home())
    return module.AsyncGRPOConfig, module.AsyncGRPOTrainer
