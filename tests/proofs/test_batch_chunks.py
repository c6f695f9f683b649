"""The counted proof reads a batch sampler it cannot vectorise as arrays of whole batches (``batch_chunks``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from composer_sampling._proofs._indices import batch_chunks

BATCHES = st.lists(st.lists(st.integers(0, 2**40), max_size=9), max_size=30)


@given(batches=BATCHES, chunk=st.integers(1, 40), length=st.sampled_from([None, 4]))
def test_the_chunks_are_the_batches_flattened_cut_at_batch_ends(batches: list[list[int]], chunk: int,
                                                               length: int | None) -> None:
    if length is not None:  # batches of one length: the one-call path
        batches = [(batch * length)[:length] or [0] * length for batch in batches]
    chunks = list(batch_chunks(iter(batches), chunk))
    flat = [index for batch in batches for index in batch]
    assert (np.concatenate(chunks).tolist() if chunks else []) == flat
    assert all(part.dtype == np.int64 and part.size for part in chunks)
    assert all(part.size >= chunk for part in chunks[:-1])
    ends = set(np.cumsum([len(batch) for batch in batches]).tolist())
    assert set(np.cumsum([part.size for part in chunks]).tolist()) <= ends  # whole batches only


def test_tensors_arrays_tuples_and_generators_are_read_like_lists() -> None:
    batches = [torch.tensor([1, 2]), np.array([3, 4]), (5, 6), (index for index in (7, 8)), [9]]
    assert [part.tolist() for part in batch_chunks(iter(batches), 4)] == [[1, 2, 3, 4], [5, 6, 7, 8], [9]]


def test_an_index_numpy_cannot_hold_raises_as_before() -> None:
    with pytest.raises(OverflowError):
        list(batch_chunks(iter([[2**70, 1]]), 4))
