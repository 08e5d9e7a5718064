"""Number formats of daisy's reports, shared by the text panel
(`daisy.run_report`) and the notebook view (`daisy.report.notebook`): seconds
scaled to their size (``50.5 ms``), bytes in powers of 1024 (``1.1 KB``).
"""

from __future__ import annotations


def format_percent(v: float) -> str:
    """A percentage, one decimal: ``62.5 %``."""
    return f"{v:.1f} %"


def format_bytes(n: float) -> str:
    """``1.1 KB``: one decimal, powers of 1024."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1024.0:
            return f"{value:.1f} {unit}"
        value /= 1024.0
    return f"{value:.1f} PB"


def seconds_scale(x: float) -> tuple[float, str]:
    """The factor and unit that show ``x`` seconds best: s, ms or µs."""
    magnitude = abs(x)
    if magnitude >= 1.0 or magnitude == 0.0:
        return 1.0, "s"
    if magnitude >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def seconds_text(x: float, scale: float, unit: str) -> str:
    """``x`` seconds in ``unit`` (given with its ``scale``): two decimals
    for seconds, one below."""
    value = x * scale
    return f"{value:.2f} {unit}" if unit == "s" else f"{value:.1f} {unit}"


def format_seconds(x: float | None) -> str:
    """``50.5 ms``, ``1.25 s``, ``60.1 µs``; ``—`` for None."""
    if x is None:
        return "—"
    return seconds_text(x, *seconds_scale(x))
