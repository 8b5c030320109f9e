"""CSV as a format, never as lines: every CSV prb writes or reads goes through here.

Files are opened with `newline=""` and parsed by the `csv` module (RFC 4180 quoting), so a cell
may hold any text: line breaks (LF, CRLF, CR, U+2028/2029, U+0085), quotes, commas, control
characters. A cell a spreadsheet would run as a formula (leading `= + - @`, tab or CR) is written
with a leading apostrophe, as OWASP advises, and read back without it; a cell that already starts
with an apostrophe before one of those gets one more, so every text round-trips exactly.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path

FORMULA = ("=", "+", "-", "@", "\t", "\r")
MARK = "'"


def neutralise(text: str) -> str:
    """`text` as a spreadsheet shows it but never evaluates it."""
    if text.startswith(FORMULA) or (
        text.startswith(MARK) and text[1:2] and text[1] in (*FORMULA, MARK)
    ):
        return MARK + text
    return text


def restore(cell: str) -> str:
    """The inverse of `neutralise`."""
    if cell.startswith(MARK) and cell[1:2] and cell[1] in (*FORMULA, MARK):
        return cell[1:]
    return cell


def dumps(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A whole CSV document (header, then rows); every text cell neutralised."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180's record separator
    writer.writerow([neutralise(str(h)) for h in header])
    for row in rows:
        writer.writerow([neutralise(v) if isinstance(v, str) else v for v in row])
    return out.getvalue()


def write(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(dumps(header, rows))


def read(text: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """(header, rows) of a CSV document, parsed once: each row as (its number as a spreadsheet
    shows it, {column: cell}), blank rows left out (the header is row 1; a quoted line break
    does not start a row). Cells are restored (see `neutralise`)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    names = [restore(h) for h in next(reader, [])]
    found = [
        (n, dict(zip(names, map(restore, record), strict=False)))
        for n, record in enumerate(reader, start=2)
        if any(record)
    ]
    return names, found


def frame_csv(df, path: Path, **kwargs) -> None:
    """A pandas frame (a leaderboard) written as CSV, its text cells and headers neutralised:
    model names and categories come from users and foreign releases."""
    import pandas as pd

    safe = df.rename(columns=lambda c: neutralise(str(c)))
    for col in safe.columns:  # text columns, whatever their dtype (pandas 3: str, not object)
        if not pd.api.types.is_numeric_dtype(safe[col]):
            safe[col] = safe[col].map(lambda v: neutralise(v) if isinstance(v, str) else v)
    safe.to_csv(path, index=False, **kwargs)
