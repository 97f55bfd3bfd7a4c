"""A process's own peak memory, for tests that bound it: the kernel's high-water mark of resident memory
(``VmHWM``), reset to the current resident size before the measured step (``/proc/self/clear_refs``),
so what the test process held before does not hide what the step adds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

STATUS = Path("/proc/self/status")
needs_proc = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="the peak is read from and reset through /proc"
)


def status_kb(field: str, status: Path = STATUS) -> int:
    """A ``kB`` figure of ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``)."""
    found = re.search(rf"{field}:\s+(\d+)", status.read_text())
    assert found is not None, f"no {field} in {status}"
    return int(found.group(1))


def reset_peak() -> int:
    """Reset this process's ``VmHWM`` to its resident size now, and return that size in kB."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_kb("VmHWM")


def peak_growth_mb(start_kb: int) -> float:
    """How far this process's peak rose above ``start_kb`` (from :func:`reset_peak`), in MB."""
    return (status_kb("VmHWM") - start_kb) / 1024
