"""``audit``'s tables without tabulate print what ``tabulate(..., tablefmt='github')`` printed, character for character.

Compared where tabulate is installed (the test environment with Composer), on the
values ``audit`` prints: ints, strings and ``None``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from composer_sampling._cli._table import github_table, keyed_table

tabulate = pytest.importorskip('tabulate').tabulate


def _not_read_as_a_float(text: str) -> bool:
    """tabulate reformats a string that reads as a float (or a bool); ours prints it as written: left out here."""
    try:
        float(text)
    except ValueError:
        return text.strip() not in ('True', 'False')
    try:
        int(text)
    except ValueError:
        return False
    return True


TEXT = st.text(st.sampled_from('ab-_. 0123456789xé日'), max_size=12).filter(_not_read_as_a_float)
VALUE = st.none() | st.integers(-10**12, 10**12) | TEXT
HEADER = st.text(st.sampled_from('abc_ xy'), min_size=1, max_size=12).filter(lambda text: text.strip() == text)


@given(st.integers(1, 5).flatmap(lambda width: st.tuples(
    st.lists(HEADER, min_size=width, max_size=width),
    st.lists(st.lists(VALUE, min_size=width, max_size=width), max_size=5))))
def test_the_table_is_tabulates(table: tuple[list[str], list[list[object]]]) -> None:
    headers, rows = table
    assert github_table(rows, headers) == tabulate(rows, headers=headers, tablefmt='github')


@given(st.lists(st.fixed_dictionaries({'attempt': TEXT, 'world_size': st.integers(1, 4096), 'run_name': VALUE,
                                       'counted': TEXT}), min_size=1, max_size=4))
def test_a_table_of_mappings_is_tabulates_with_their_keys(rows: list[dict[str, object]]) -> None:
    assert keyed_table(rows) == tabulate(rows, headers='keys', tablefmt='github')


def test_the_audit_tables_as_printed() -> None:
    rows = [(0, 1436, 1434, 2, 0, 'ok'), (1, 700, 700, 0, 738, 'partial (run ended at batch 7)')]
    headers = ['epoch', 'trained', 'exactly once', 'repeated', 'missing', 'status']
    assert github_table(rows, headers) == tabulate(rows, headers=headers, tablefmt='github')
    attempts = [{'attempt': '6f0fda79367a469d', 'run_name': None, 'world_size': 2, 'resumed_from': '-',
                 'start_batch': 0, 'last_batch': 12, 'counted': 'batches 1-12'},
                {'attempt': '0123456789012345', 'run_name': '2024', 'world_size': 16, 'resumed_from':
                 '6f0fda79367a469d at batch 5', 'start_batch': 5, 'last_batch': 7, 'counted': 'abandoned'}]
    assert keyed_table(attempts) == tabulate(attempts, headers='keys', tablefmt='github')
