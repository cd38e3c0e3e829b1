"""Natural ordering of names, so ``mlx5_2`` sorts before ``mlx5_10`` everywhere."""

from __future__ import annotations

import re

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key splitting ``name`` into text and number runs."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name) if part
    )
