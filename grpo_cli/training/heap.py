"""glibc's mmap threshold, raised once before training so that a CPU step reuses its heap pages.

glibc returns the free top of its heap to the kernel once it exceeds the trim threshold (twice the mmap threshold,
which starts at 128 KiB), so memory a step frees is handed back and faulted in again, zeroed, by the next step.
Both thresholds rise by themselves each time a mapped block is freed, so where they end depends on what the process
happened to allocate before training: the same demo step in two processes differed by 30 % in page faults and
1-2 ms of kernel time (docs/performance.md, issue 26). Freeing one 4 MiB mapped block sets them as such a history
would, and keeps glibc's own adjustment on (`mallopt` would freeze it): blocks up to 4 MiB come from the heap, and
up to 8 MiB stay free at its top.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import TYPE_CHECKING

from grpo_cli.training.cuda_segments import expand_cuda_segments

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

PRIMED_BYTES = 4 << 20
USER_SETTINGS = ("MALLOC_", "GLIBC_TUNABLES")
"""Environment variables (by prefix) that tune glibc's allocator: when the user set one, their settings win."""


def glibc() -> ctypes.CDLL:
    """The process's C library with `malloc` and `free` typed (pointers are 64-bit, ctypes defaults to int)."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    return libc


def raise_mmap_threshold(nbytes: int = PRIMED_BYTES) -> bool:
    """Allocate and free one `nbytes` block through glibc; False (nothing done) off glibc or when user-tuned.

    The threshold only ever rises, so a process whose history already raised it past `nbytes` keeps its own.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if any(k.startswith(USER_SETTINGS) for k in os.environ):
        return False
    libc = glibc()
    block = libc.malloc(nbytes)
    if not block:
        return False
    libc.free(block)
    return True


def prepare_allocators(recipe: Recipe) -> None:
    """Both allocators set once before training: PyTorch's CUDA segments (`cuda_segments.py`, before CUDA starts)
    and glibc's thresholds (above); each leaves a user's own settings alone."""
    expand_cuda_segments(recipe)
    raise_mmap_threshold()
