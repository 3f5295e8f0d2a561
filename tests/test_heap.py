"""grpo train raises glibc's thresholds before training: the heap a step frees is reused, not faulted in again."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from grpo_cli.training.heap import USER_SETTINGS

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc's allocator only")

# A "step" that allocates twenty 100 KiB blocks (2 MiB), writes them and frees them, 20 times; prints the minor
# page faults. Blocks under the threshold come from the heap; freed, they leave its top free, which glibc returns
# to the kernel past its trim threshold (twice the mmap threshold), to fault it in again on the next step.
STEPS = """
import ctypes, resource, sys
from grpo_cli.training.heap import glibc, raise_mmap_threshold
primed = raise_mmap_threshold() if sys.argv[1] == "primed" else False
libc = glibc()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    blocks = [libc.malloc(100 << 10) for _ in range(20)]
    for block in blocks:
        ctypes.memset(block, 1, 100 << 10)
    for block in reversed(blocks):
        libc.free(block)
print(primed, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(USER_SETTINGS)}
    out = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, check=True,
                         env={**clean, **env}).stdout.split()
    return out[0], int(out[1])


def test_primed_steps_reuse_their_pages_instead_of_faulting_them_in_again() -> None:
    _, unprimed = _faults("unprimed")
    primed_flag, primed = _faults("primed")
    pages = (2 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert primed_flag == "True"
    assert unprimed >= 15 * pages  # each step's freed heap top is trimmed and faulted in again
    assert primed <= 2 * pages  # the first step faults it in; the rest reuse the heap


def test_the_users_own_allocator_settings_are_left_alone() -> None:
    flag, faults = _faults("primed", MALLOC_ARENA_MAX="2")
    assert flag == "False"
    assert faults >= 15 * (2 << 20) // os.sysconf("SC_PAGE_SIZE")
