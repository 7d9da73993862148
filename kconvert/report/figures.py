"""How a figure is printed in the terminal and in one-line formats: three decimals, rates as percentages, and
"n/a" where there was nothing to divide by."""
from __future__ import annotations

from typing import Any


def number(v: Any, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def percent(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2%}"


def series(values: Any) -> str:
    """Per-position figures, ` / `-separated."""
    return " / ".join(number(x) for x in values or []) or "n/a"
