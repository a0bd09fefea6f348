"""Markdown tables for the experiments' reports (compare.md, motivate.md, scale.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Format = Callable[[Any], str]


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], fmt: Format | Sequence[Format] = str,
                   right: Sequence[bool] | None = None) -> str:
    """A GitHub Markdown table: header, alignment row and one line per row, without a trailing newline.

    ``fmt`` turns a cell into its text: one function for every column, or one per column. ``right``: which
    columns are right-aligned (numbers), none by default.
    """
    fmts = [fmt] * len(columns) if callable(fmt) else list(fmt)
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if r else "---" for r in (right or [False] * len(columns))) + "|"]
    lines += ["| " + " | ".join(f(cell) for f, cell in zip(fmts, row, strict=True)) + " |" for row in rows]
    return "\n".join(lines)


def g4(value: Any) -> str:
    """Floats to 4 significant digits, anything else as ``str`` gives it."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)
