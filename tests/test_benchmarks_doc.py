"""BENCHMARKS.md's first table quotes its sections: every figure is in the section it names, every ratio adds up.

The table at a glance is written by hand from the sections below it, which the
benchmark scripts write. When a script is rerun and a figure changes, this test
names the row to bring up to date.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = (ROOT / 'BENCHMARKS.md').read_text()
GLANCE = re.compile(r'<!-- at-a-glance -->(.*?)<!-- /at-a-glance -->', re.S)
NUMBER = re.compile(r'\d[\d,]*(?:\.\d+)?')
UNITS = {'ns': 1e-9, 'us': 1e-6, 'ms': 1e-3, 's': 1.0, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30, 'MB': 1e6,
         'GB': 1e9, 'M/s': 1e6, 'MiB/s': 2**20, 'GiB/s': 2**30}


def _rows() -> list[dict[str, str]]:
    found = GLANCE.search(BENCHMARKS)
    assert found, 'BENCHMARKS.md has no <!-- at-a-glance --> table'
    lines = [line for line in found.group(1).splitlines() if line.startswith('|')]
    header = [cell.strip() for cell in lines[0].strip('|').split('|')]
    return [dict(zip(header, (cell.strip() for cell in line.strip('|').split('|')), strict=True))
            for line in lines[2:]]


def _section(name: str) -> str:
    found = re.search(rf'<!-- {re.escape(name)} -->(.*?)<!-- /{re.escape(name)} -->', BENCHMARKS, re.S)
    assert found, f'BENCHMARKS.md has no section {name}'
    return found.group(1)


def _bounds(figure: str) -> tuple[float, float]:
    """The interval a printed figure stands for (``12 s``: 11.5 to 12.5 s), in the base unit (seconds, bytes, ...);
    a bare number is its own unit.

    Example:
        >>> _bounds('12 s'), _bounds('1,335.1 ms'), _bounds('3.9')
        ((11.5, 12.5), (1.33505, 1.33515), (3.85, 3.95))
    """
    match = re.fullmatch(r'(\d[\d,]*(?:\.\d+)?) ?(\S*)', figure)
    assert match, f'{figure!r} is not a number and a unit'
    value = Decimal(match.group(1).replace(',', ''))
    half = Decimal(1).scaleb(value.as_tuple().exponent) / 2  # type: ignore[arg-type]
    scale = UNITS[match.group(2)] if match.group(2) else 1.0
    return float(value - half) * scale, float(value + half) * scale


ROWS = _rows()


def test_the_table_has_a_row_for_each_kind_of_anchor() -> None:
    anchors = ' '.join(row['anchor (same run)'] for row in ROWS)
    for anchor in ("torch's DistributedSampler", "Composer's spin", '`cat`'):
        assert anchor in anchors, f'no row of the table at a glance is measured against {anchor}'


@pytest.mark.parametrize('row', ROWS, ids=lambda row: row['measure'])
def test_each_figure_is_in_its_section(row: dict[str, str]) -> None:
    section = _section(row['section'].strip('`'))
    for column in ('ours', 'anchor figure'):
        assert row[column] in section, (f'BENCHMARKS.md at a glance, {row["measure"]!r}: {row[column]!r} is not in '
                                        f'{row["section"]}; copy the figure from the section again')


def _ratio_bounds(ours: tuple[float, float], anchor: tuple[float, float], ratio: str,
                  rate: bool) -> tuple[float, float]:
    """What a ratio cell may state, given the intervals of its two figures.

    ``N%``: ours as a share of the anchor. Otherwise our advantage (the anchor's
    time or memory over ours; our rate over the anchor's), stated as ``Nx faster``
    or ``Nx less``, or its inverse as ``Nx slower`` or ``Nx more``.

    Example:
        >>> _ratio_bounds((1.0, 1.0), (4.0, 4.0), '4x faster', rate=False)
        (4.0, 4.0)
    """
    if ratio.endswith('%'):
        return ours[0] / anchor[1] * 100, ours[1] / anchor[0] * 100
    advantage = (ours[0] / anchor[1], ours[1] / anchor[0]) if rate else (anchor[0] / ours[1], anchor[1] / ours[0])
    if 'slower' in ratio or 'more' in ratio:
        return 1 / advantage[1], 1 / advantage[0]
    return advantage


@pytest.mark.parametrize('row', ROWS, ids=lambda row: row['measure'])
def test_each_ratio_follows_from_its_figures(row: dict[str, str]) -> None:
    stated = NUMBER.search(row['ratio'])
    assert stated, f'{row["ratio"]!r} states no number'
    low, high = _bounds(stated.group(0))
    possible = _ratio_bounds(_bounds(row['ours']), _bounds(row['anchor figure']), row['ratio'],
                             rate=row['ours'].endswith('/s'))
    assert low <= possible[1] and high >= possible[0], (
        f'BENCHMARKS.md at a glance, {row["measure"]!r}: {row["ratio"]!r} does not follow from {row["ours"]} '
        f'and {row["anchor figure"]} (between {possible[0]:.3g} and {possible[1]:.3g})')
