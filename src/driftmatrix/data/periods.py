"""Period labels shared by the readers (natural period of a record) and slicing (slice labels)."""

from __future__ import annotations

PERIOD_MONTHS = {"year": 12, "half-year": 6, "quarter": 3, "month": 1}


def month_label(month: int, period: str) -> str:
    """Label of the period holding absolute month ``month`` (= year * 12 + month index 0..11)."""
    y, mo = divmod(month, 12)
    if period == "year":
        return f"{y}"
    if period == "half-year":
        return f"{y}-H{mo // 6 + 1}"
    if period == "quarter":
        return f"{y}-Q{mo // 3 + 1}"
    if period == "month":
        return f"{y}-{mo + 1:02d}"
    raise ValueError(f"period {period!r} not in {sorted(PERIOD_MONTHS)}")


def slice_label(start_month: int, period: str, width: int = 1) -> str:
    """Label of a slice of ``width`` periods starting at ``start_month`` (``1950..1954`` when wide)."""
    first = month_label(start_month, period)
    if width == 1:
        return first
    return f"{first}..{month_label(start_month + PERIOD_MONTHS[period] * (width - 1), period)}"
