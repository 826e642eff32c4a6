"""How many tasks one run can hold: the engine keeps a record per task, so memory bounds a bag.

``count = 1000000000`` in a bag ended ``resel run``/``plan`` in ``MemoryError`` after minutes of
swapping, and ``resel simulate --sizes 1000000000`` ran on silently. A run now checks up front
that its tasks fit in the memory this machine has available, and says so when they do not.
"""

from __future__ import annotations

import os

from resel.errors import ReselError

#: bytes one task takes during a run: measured ~1.3 KB (peak RSS of `resel simulate --sizes
#: 100000 --strategies reselect`, events recorded and stored), doubled for headroom
BYTES_PER_TASK = 2048


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def max_tasks(memory: int | None = None) -> int | None:
    """The largest bag one run can hold with ``memory`` bytes (default: available now)."""
    memory = available_memory() if memory is None else memory
    return None if memory is None else max(1, memory // BYTES_PER_TASK)


def check_task_count(count: int, what: str, memory: int | None = None,
                     hint: str = "split the bag into smaller ones") -> None:
    """Refuse a run of ``count`` tasks that cannot fit in memory; ``what`` names the input.

    Raises:
        ReselError: e.g. ``bag.count 1,000,000,000: a run of that many tasks needs about 2.0 TB
            of memory (2 KiB per task) and this machine has 23.0 GB available (at most …)``.
    """
    memory = available_memory() if memory is None else memory
    limit = max_tasks(memory)
    if limit is None or count <= limit:
        return
    raise ReselError(f"{what} {count:,}: a run of that many tasks needs about {_size(count * BYTES_PER_TASK)} "
                     f"of memory ({BYTES_PER_TASK // 1024} KiB per task) and this machine has {_size(memory)} "
                     f"available, enough for {limit:,} tasks; {hint}")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.1f} TB"
