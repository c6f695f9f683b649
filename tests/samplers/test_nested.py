"""NestedBatchSampler: a batch of batches."""

from __future__ import annotations

from itertools import chain

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, SequentialSampler

from composer_sampling import NestedBatchSampler, ResumableDistributedSampler


def test_inner_batch_3_times_5_is_15() -> None:
    nested = NestedBatchSampler(BatchSampler(SequentialSampler(range(30)), 3, drop_last=False), num_batches=5)
    assert [len(batch) for batch in nested] == [15, 15]
    assert list(chain.from_iterable(nested)) == list(range(30))


@given(n=st.integers(1, 200), inner=st.integers(1, 9), groups=st.integers(1, 7), drop_last=st.booleans(),
       inner_drop=st.booleans())
def test_len_matches_what_it_yields(n, inner, groups, drop_last, inner_drop) -> None:
    nested = NestedBatchSampler(BatchSampler(SequentialSampler(range(n)), inner, inner_drop), groups, drop_last)
    batches = list(nested)
    assert len(nested) == len(batches)
    assert all(len(batch) == inner * groups for batch in batches[:-1])
    flat = list(chain.from_iterable(batches))
    everything = list(chain.from_iterable(BatchSampler(SequentialSampler(range(n)), inner, inner_drop)))
    assert flat == everything[:len(flat)]  # inner order kept
    dropped = len(everything) - len(flat)
    assert dropped == 0 if not drop_last else dropped < inner * groups


def test_set_epoch_is_forwarded() -> None:
    class Recording(BatchSampler):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.epochs: list[int] = []

        def set_epoch(self, epoch: int) -> None:
            self.epochs.append(epoch)

    inner = Recording(SequentialSampler(range(4)), 2, False)
    NestedBatchSampler(inner, 2).set_epoch(7)
    assert inner.epochs == [7]
    sampler = ResumableDistributedSampler(10, 1, 0)
    NestedBatchSampler(BatchSampler(sampler, 2, False), 2).set_epoch(3)  # torch's BatchSampler has none: no error
    assert sampler.epoch == 0


@pytest.mark.parametrize(
    ('args', 'error', 'message'),
    [
        ((BatchSampler(SequentialSampler(range(4)), 2, False), 0), ValueError, 'num_batches must be in the interval'),
        ((BatchSampler(SequentialSampler(range(4)), 2, False), 2, 'yes'), TypeError, 'drop_last must be a bool'),
        ((42, 2), TypeError, 'batch_sampler must be a batch sampler with __iter__ and __len__, got int'),
    ],
)
def test_bad_arguments(args, error, message) -> None:
    with pytest.raises(error, match=message):
        NestedBatchSampler(*args)
