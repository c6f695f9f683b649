"""The tables that ``audit`` prints, in GitHub's Markdown form, without the tabulate package.

The output is the one ``tabulate(rows, headers, tablefmt='github')`` gives for the
values ``audit`` prints (ints, strings and ``None``), character for character:
``tests/cli/test_table.py`` compares the two where tabulate is installed. A column
whose values are all ints, or strings that read as ints, is aligned right, any other
column left; ``None`` is an empty cell; strings in a column aligned left lose their
surrounding blanks; each column is as wide as its widest cell, and at least two more
than its header. One
thing is deliberately not copied: tabulate reformats strings that read as floats
(``'12e5'`` becomes ``1.2e+06``), while here a string is printed as written.

Example:
    >>> print(github_table([(0, 50, 'ok'), (1, 12, 'partial')], ['epoch', 'trained', 'status']))
    |   epoch |   trained | status   |
    |---------|-----------|----------|
    |       0 |        50 | ok       |
    |       1 |        12 | partial  |
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence

__all__ = ['github_table', 'keyed_table']

#: The blanks a column is wider than its header, at least (tabulate's ``MIN_PADDING``).
_HEADER_PADDING = 2


def keyed_table(rows: Sequence[Mapping[str, object]]) -> str:
    """:func:`github_table` of mappings, their keys as the headers, in the order they first appear (tabulate's
    ``headers='keys'``).

    Example:
        >>> print(keyed_table([{'attempt': 'a1', 'world_size': 2}]))
        | attempt   |   world_size |
        |-----------|--------------|
        | a1        |            2 |
    """
    headers = list(dict.fromkeys(key for row in rows for key in row))
    return github_table([[row.get(key) for key in headers] for row in rows], headers)


def github_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    """``rows`` under ``headers`` as a GitHub Markdown table, one line a row, without a final newline."""
    columns = [[row[k] if k < len(row) else None for row in rows] for k in range(len(headers))]
    right = [_numeric(column) for column in columns]
    cells = [[_text(value, numeric) for value in column] for column, numeric in zip(columns, right, strict=True)]
    widths = [max([_width(header) + _HEADER_PADDING, *map(_width, texts)]) for header, texts in zip(
        headers, cells, strict=True)]

    def line(texts: Sequence[str]) -> str:
        return '| ' + ' | '.join(_pad(text, width, flush) for text, width, flush in zip(
            texts, widths, right, strict=True)) + ' |'

    lines = [line(headers), '|' + '|'.join('-' * (width + 2) for width in widths) + '|']
    lines += [line([column[r] for column in cells]) for r in range(len(rows))]
    return '\n'.join(lines)


def _numeric(column: Sequence[object]) -> bool:
    """Whether tabulate would align the column right: every value that is not None an int or a string of one (not
    a bool, nor the string ``'True'`` or ``'False'``), and at least one such value."""
    values = [value for value in column if value is not None]
    return bool(values) and all(_reads_as_int(value) for value in values)


def _reads_as_int(value: object) -> bool:
    if type(value) is int:
        return True
    if not isinstance(value, str) or value in ('True', 'False'):
        return False
    try:
        int(value)
    except ValueError:
        return False
    return True


def _text(value: object, numeric: bool) -> str:
    """The cell of ``value``: a string loses its surrounding blanks in a column aligned left only, as in tabulate."""
    if value is None:
        return ''
    return str(value) if numeric else str(value).strip()


def _width(text: str) -> int:
    """The columns ``text`` takes on a terminal: 2 for a wide East Asian character, 0 for a combining mark."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in 'WF' else 1
               for char in text)


def _pad(text: str, width: int, right: bool) -> str:
    blanks = ' ' * (width - _width(text))
    return blanks + text if right else text + blanks
