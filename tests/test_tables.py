"""The experiments' Markdown table writer."""

from __future__ import annotations

from minionsrl.experiments.tables import g4, markdown_table


def test_markdown_table_has_header_alignment_and_one_line_per_row() -> None:
    table = markdown_table(["arm", "n", "return"], [["fixed-4", 2, 1.5], ["nitro", 3, None]])
    assert table == ("| arm | n | return |\n"
                     "|---|---|---|\n"
                     "| fixed-4 | 2 | 1.5 |\n"
                     "| nitro | 3 | None |")


def test_markdown_table_formats_cells_per_table_or_per_column() -> None:
    rows = [[1, 3.14159, 1234567.0]]
    assert markdown_table(["a", "b", "c"], rows, "{:.4g}".format).splitlines()[-1] == "| 1 | 3.142 | 1.235e+06 |"
    per_column = markdown_table(["a", "b", "c"], rows, [str, "{:.1f}".format, g4])
    assert per_column.splitlines()[-1] == "| 1 | 3.1 | 1.235e+06 |"
    assert markdown_table(["a"], []) == "| a |\n|---|"


def test_g4_rounds_floats_only() -> None:
    assert [g4(0.123456), g4(12), g4("x"), g4(None)] == ["0.1235", "12", "x", "None"]
