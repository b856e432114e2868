"""Column facts for a table the model reads: a small model cannot compare or add the numbers
of a CSV file (asked which item of ``item,qty`` has the largest qty, the 1.5B embedded model
names the first row; asked for a column's total, it guesses), but it reads a sentence that
says so. :class:`TableFacts` adds that sentence to the read."""

from __future__ import annotations

import csv
import io
import math
from pathlib import PurePosixPath

from ..policy import CallHandler, RunPolicy, RunScope, ToolCallRun
from ..types import AgentToolResult, TextContent
from .steps import WORKSPACE_TOOLS, ToolNames, call_argument

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
"""The file kinds read as tables, with their delimiter."""
MAX_TABLE_ROWS = 10_000
"""A table with more rows gets no facts (the read shows only part of it anyway)."""
MAX_FACT_COLUMNS = 8
"""At most this many numeric columns are described."""
MAX_LABEL_CHARS = 40


class TableFacts(RunPolicy):
    """After a whole read of a ``.csv`` or ``.tsv`` file, adds to the tool's result one line of
    facts per numeric column, computed from the text the model was given: its largest and
    smallest value with the row's label (the first column that is not a number), and its sum,
    over the rows read. The model still sees the file as it is; the facts come after it,
    marked as computed by the harness.

    A read that shows only part of the file (a ``[showing lines ...]`` mark, an offset), a
    table whose rows disagree on their number of fields, one with fewer than two data rows or
    more than :data:`MAX_TABLE_ROWS` gets nothing. It costs about 15 tokens per numeric column
    on each such read, and nothing on any other call.
    """

    name = "tables"

    def __init__(self, names: ToolNames = WORKSPACE_TOOLS):
        self.names = names

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        result = call_next(call)
        if call.tool.name != self.names.read or result.is_error:
            return result
        path = call_argument(call, "path")
        if not isinstance(path, str):
            return result
        delimiter = TABLE_SUFFIXES.get(PurePosixPath(path).suffix.lower())
        offset = call_argument(call, "offset")
        if delimiter is None or (isinstance(offset, int) and offset > 1):
            return result
        facts = column_facts(result.text, delimiter)
        if facts is None:
            return result
        return result.model_copy(update={"content": [*result.content, TextContent(text=facts)]})


def column_facts(text: str, delimiter: str = ",") -> str | None:
    """The facts line :class:`TableFacts` adds for a table's ``text`` (a header row, then data
    rows), or ``None`` when it is not a whole table with a numeric column."""
    table = _table_of(text, delimiter)
    if table is None:
        return None
    header, data = table
    numbers = [[_number(cell) for cell in row] for row in data]
    numeric = [c for c in range(len(header)) if all(row[c] is not None for row in numbers)]
    if not numeric:
        return None
    label = next((c for c in range(len(header)) if c not in numeric), None)
    lines = [
        _column_line(header[c], [row[c] for row in data], label, data, c)
        for c in numeric[:MAX_FACT_COLUMNS]
    ]
    return (
        f"\n(Column facts, computed by the harness over the {len(data)} rows above: "
        + "; ".join(lines)
        + ".)"
    )


def _table_of(text: str, delimiter: str) -> tuple[list[str], list[list[str]]] | None:
    """The header and data rows of a whole table, or ``None`` (a part of a file, ragged rows,
    fewer than two data rows, too many)."""
    if "[showing lines" in text:
        return None
    try:
        rows = [r for r in csv.reader(io.StringIO(text), delimiter=delimiter) if any(r)]
    except csv.Error:
        return None
    if len(rows) < 3 or len(rows) > MAX_TABLE_ROWS + 1:
        return None
    header, data = rows[0], rows[1:]
    if len(header) < 2 or any(len(r) != len(header) for r in data):
        return None
    return header, data


def _column_line(
    name: str, cells: list[str], label: int | None, data: list[list[str]], column: int
) -> str:
    """One numeric column's facts: ``qty: largest 30 (plums), smallest 3 (figs), sum 50``."""
    values = [v for v in map(_number, cells) if v is not None]  # all are numbers
    top = max(range(len(values)), key=values.__getitem__)
    low = min(range(len(values)), key=values.__getitem__)
    return (
        f"{name.strip() or f'column {column + 1}'}: largest {cells[top].strip()}"
        f"{_label(data, top, label)}, smallest {cells[low].strip()}"
        f"{_label(data, low, label)}, sum {_plain(sum(values))}"
    )


def _number(cell: str) -> float | None:
    text = cell.strip().replace("_", "")
    if not text or len(text) > 40:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _label(data: list[list[str]], row: int, column: int | None) -> str:
    if column is None:
        return f" (row {row + 1})"
    label = " ".join(data[row][column].split())[:MAX_LABEL_CHARS]
    return f" ({label})" if label else f" (row {row + 1})"


def _plain(value: float) -> str:
    """A sum as a person writes it: ``50``, ``3.5``."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}"
