"""One data epoch split into sub-epochs, so that evaluation and checkpoints come more often."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from composer_sampling._validate import dataset_length, valid_int
from composer_sampling.positions import rank_count, samples_per_rank, split_window
from composer_sampling.samplers._base import OrderedSampler

__all__ = ['SubEpochDistributedSampler']


class SubEpochDistributedSampler(OrderedSampler):
    """A trainer epoch is one sub-epoch: ``S`` of them make one pass over the data.

    ``set_epoch(e)`` selects data epoch ``e // S`` and sub-epoch ``e % S``. Each
    rank's share of the data epoch (torch's ``num_samples``: padded, or cut with
    ``drop_last``) is split into ``S`` runs whose sizes differ by at most one, the
    remainder going to the first sub-epochs; so across ranks and sub-epochs every
    sample is trained exactly once per data epoch (up to ``W - 1`` padded or
    dropped), and each data epoch draws a new order. ``len()`` is the current
    sub-epoch's count. Mid-sub-epoch resume is exact on the same world size; the
    sub-epoch windows are per-rank shares, so a resume on another world size is
    refused (``num_replicas`` is part of :meth:`order_signature`).

    Args:
        dataset (Sized | int): the dataset, or its length.
        sub_epochs_per_epoch (int): ``S >= 1``, at most the per-rank share.
        num_replicas, rank, shuffle, seed, drop_last: as for
            :class:`~composer_sampling.ResumableDistributedSampler`.

    Example:
        >>> sampler = SubEpochDistributedSampler(103, 5, num_replicas=2, rank=0)
        >>> sizes = []
        >>> for epoch in range(5):
        ...     sampler.set_epoch(epoch)
        ...     sizes.append(len(sampler))
        >>> sizes  # rank 0's share of 52 in 5 sub-epochs
        [11, 11, 10, 10, 10]
    """

    _repr_fields = ('dataset', 'sub_epochs_per_epoch', 'num_replicas', 'rank', 'shuffle', 'seed', 'drop_last')

    def __init__(
        self,
        dataset: Any,
        sub_epochs_per_epoch: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.dataset = dataset
        self.dataset_len = dataset_length(dataset)
        self.sub_epochs_per_epoch = valid_int('sub_epochs_per_epoch', sub_epochs_per_epoch, minimum=1)
        super().__init__(num_replicas, rank, shuffle, seed, drop_last)
        if self.sub_epochs_per_epoch > self.rank_share:
            raise ValueError(
                f'sub_epochs_per_epoch={sub_epochs_per_epoch} exceeds the {self.rank_share} samples each of the '
                f'{self.num_replicas} ranks gets per data epoch (dataset length {self.dataset_len}); use at most '
                f'{self.rank_share}, or sub-epochs would be empty',
            )

    @property
    def rank_share(self) -> int:
        """Samples each rank trains in one data epoch."""
        return samples_per_rank(self.dataset_len, self.num_replicas, self.drop_last)

    @property
    def data_epoch(self) -> int:
        """The pass over the data that the current trainer epoch belongs to."""
        return self.epoch // self.sub_epochs_per_epoch

    @property
    def sub_epoch(self) -> int:
        """The current sub-epoch within its data epoch."""
        return self.epoch % self.sub_epochs_per_epoch

    def _window(self) -> tuple[int, int]:
        return split_window(self.rank_share, self.sub_epochs_per_epoch, self.sub_epoch)

    def pass_window(self, epoch: int) -> tuple[int, int]:
        """Sub-epoch ``epoch % S`` reads the ``epoch % S``-th of ``S`` runs of each rank's share of the data epoch;
        the runs' sizes differ by at most one, and a run that starts at ``start`` in the share starts at global
        position ``start * num_replicas``."""
        start, stop = split_window(self.rank_share, self.sub_epochs_per_epoch, epoch % self.sub_epochs_per_epoch)
        return start * self.num_replicas, stop - start

    def _rank_samples(self) -> int:
        """Indices per rank in the current sub-epoch."""
        start, stop = self._window()
        return stop - start

    def epoch_usage(self) -> tuple[int, int]:
        """Dataset length and samples trained across ranks in one data epoch."""
        return self.dataset_len, self.rank_share * self.num_replicas

    def _pass_end(self) -> int:
        start, stop = self._window()
        return (stop - start) * self.num_replicas

    def _iter_pass(self, offset: int) -> Iterator[int]:
        start, stop = self._window()
        first = start * self.num_replicas + offset
        count = rank_count(first, stop * self.num_replicas, self.rank, self.num_replicas)
        return self._iter_rank(first, count, self.data_epoch, offset)

    def order_signature(self) -> dict[str, Any]:
        return {
            'sampler': type(self).__name__,
            'dataset_len': self.dataset_len,
            'shuffle': self.shuffle,
            'sub_epochs_per_epoch': self.sub_epochs_per_epoch,
            'num_replicas': self.num_replicas,
            'drop_last': self.drop_last,
        }

