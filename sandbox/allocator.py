"""The same host allocator behaviour in every evaluation process.

glibc's malloc serves a large request from the heap or from a fresh mmap depending on a
threshold that moves with the process's history: it starts at 128 KB and rises each time an
mmapped chunk is freed (up to 32 MB). Below the threshold a tensor's memory is reused from the
heap; above it every allocation maps new pages and faults each one in on first touch. Two
processes running the same forward can therefore differ by the page faults of their outputs:
an honest copy of a 512x1024 softmax read 0.2-0.4x on the cpu backend because the reference had
raised its threshold (it had freed big buffers) and the candidate, whose inputs arrive as
mapped memfds, had not; with the thresholds fixed it read 0.93x and 1.04x, intervals holding 1.0
(docs/benchmarks.md, ninth session). Fixing them at the values glibc itself converges to after
the first large free (mmap at 32 MB, trim at twice that) gives every process the steady state
from its first call, whatever it did before.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit hosts
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD


def steady() -> bool:
    """Fix the thresholds in this process (True), or say it could not (another libc: False)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
