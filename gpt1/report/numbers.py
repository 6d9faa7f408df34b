"""Numbers as the paper prints them: percent with one decimal, rounded half up; exact means of printed numbers.

Python's round() rounds half to even on the binary value, which would print MNLI 81.75 as 81.7 and Table 5's
full-model average 74.65 as 74.6; the paper prints 81.8 and 74.7.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from gpt1.pipeline.errors import ReportError


def exact_decimal(value: float) -> Decimal:
    # Through repr, and to 9 places: 100 * 0.8175 is 81.74999999999999 in binary, printed 81.75 by everyone.
    return Decimal(repr(float(value))).quantize(Decimal("1e-9"))


def round_half_up(value: float, digits: int = 1) -> float:
    """Round as the paper prints: 81.75 -> 81.8, 74.65 -> 74.7 (round() would give 74.6)."""
    return float(exact_decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def paper_average(values: Iterable[float]) -> Decimal:
    """The exact mean of printed one-decimal numbers (no binary error): 553.3 / 8 = 69.1625."""
    numbers = [exact_decimal(v) for v in values]
    if not numbers:
        raise ReportError("paper average: no values")
    return sum(numbers, Decimal(0)) / len(numbers)


def difference(ours: float, paper: float) -> float:
    """Δ between the two numbers as printed, so that the printed Δ is their printed difference."""
    return float(exact_decimal(round_half_up(ours)) - exact_decimal(paper))


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value: no spread to show)."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1)) if array.size > 1 else None


def mean_se(errors: Sequence[float]) -> float:
    """The standard error of the mean of independent estimates with standard errors `errors`."""
    return math.sqrt(sum(e * e for e in errors)) / len(errors)
