"""Keep freed memory in the process for reuse (glibc malloc), once per engine process.

Why: PyTorch's CPU allocator is plain ``malloc``. Every training step allocates and frees the
same few-MB activations; glibc returns such blocks to the kernel (``munmap``/heap trim) and the
next step takes them back through page faults, ~3,000 per step on the bundled pair (measured
with ``getrusage``) - several percent of a step. Raising the mmap threshold to its maximum
(32 MiB) and the trim threshold to 1 GiB makes those blocks stay in the heap, as jemalloc or
tcmalloc would (PyTorch's CPU performance guide recommends either). The process keeps its peak
heap instead of shrinking between steps. No-op outside glibc; opt out with OPD_ENGINE_MALLOC=0.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

from opd_nb import settings

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's upper bound on 64-bit
TRIM_THRESHOLD = 1 << 30

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the malloc settings above (idempotent); True when they are in effect."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux") or not settings.ENGINE_MALLOC.get():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc: nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1
    ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    ok = mallopt(M_TOP_PAD, 64 * 1024 * 1024) == 1 and ok
    _done = ok
    return ok
