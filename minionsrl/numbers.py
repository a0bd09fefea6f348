"""What counts as a number in a file, a reply or a price catalogue: one rule for every reader of untrusted data.

JSON's ``true`` decodes to a Python ``bool``, an ``int`` subclass, and ``NaN``/``Infinity`` decode to floats, so
``isinstance(v, int | float)`` alone would take all three for numbers.
"""

from __future__ import annotations

import math
from typing import Any


def is_number(value: Any) -> bool:
    """A finite ``int`` or ``float``, not a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_amount(value: Any) -> bool:
    """A finite number ≥ 0: a price, a duration, a limit."""
    return is_number(value) and value >= 0
