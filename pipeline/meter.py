"""What a build spends, stage by stage: wall time and peak memory, for run_stats.json (never
the hashed release files: they vary from machine to machine). Peak memory is the process's
VmHWM, reset before each stage where Linux allows it, so each stage's figure is its own."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_STATUS = Path("/proc/self/status")


def peak_rss_gib() -> float | None:
    """This process's peak resident memory since the last reset (or its exec), in GiB; None
    off Linux. Not ru_maxrss: on Linux that carries the spawning parent's peak over through
    fork/exec, so a child would report at least its parent's size."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024**2, 3)
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    """Start a new peak (Linux: 5 to clear_refs resets VmHWM, and nothing else)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def give_back_freed_arrays() -> bool:
    """Keep glibc's mmap threshold at 128 KiB. glibc raises it (up to 32 MiB) each time a
    large block is freed, so later large arrays come from the heap, which keeps what they free:
    a step's peak then counts the arrays of the steps before it. Fixed, every array of 128 KiB
    or more is mapped on its own and given back when freed. Measured on the artifact gate over
    the 50,001 pairs of bench/scale.py: peak 0.851 -> 0.627 GiB, the same 21 s. False where
    the C library is not glibc (nothing changes there)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, 128 * 1024))
    except (OSError, AttributeError):
        return False


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


@contextmanager
def timed(into: dict[str, float], part: str) -> Iterator[None]:
    """Adds the seconds the block takes to `into[part]` (a part may run many times)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        into[part] = into.get(part, 0.0) + time.perf_counter() - t0
