"""A drop-in ``DistributedSampler`` with O(1) memory and exact, elastic mid-epoch resume."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from composer_sampling._validate import MAX_REPLICAS, dataset_length
from composer_sampling.positions import (
    IndexArray,
    rank_positions,
    samples_per_rank,
)
from composer_sampling.samplers._base import OrderedSampler

__all__ = ['ResumableDistributedSampler']


class ResumableDistributedSampler(OrderedSampler):
    """Torch's ``DistributedSampler``, without the list of N indices and with a start offset.

    The epoch's global order is a seeded bijection on ``[0, N)`` evaluated on
    demand (:class:`composer_sampling.permutation.Permutation`), so epoch start costs the
    same at N = 1e3 and N = 1e10. Rank ``r`` of ``W`` reads global positions
    ``r, r + W, ...``; ``len``, ``num_samples``, ``total_size``, padding (the
    start of the epoch's order repeated, at most ``W - 1`` samples) and
    ``drop_last`` (at most ``W - 1`` samples dropped) are torch's.

    A pass can start mid-epoch at a *global* sample count
    (:meth:`set_sample_in_epoch`, which :class:`~composer_sampling.SamplerSync`
    calls from Composer's ``timestamp.sample_in_epoch``). Rank ``r`` then reads
    positions ``start + r, start + r + W, ...`` to the end of the epoch: the same
    samples the uninterrupted run would have read, on any world size. The offset
    applies to that one pass; the next pass is the whole epoch again. ``len()``
    stays the full epoch's count, as Composer expects. An offset at or past the end
    of the epoch (the end of a pass on another world size, padding included) leaves
    nothing to read and is recorded as this sampler's end.

    ``state_dict()`` says how far the current pass has been read (a global
    position), so torchdata's ``StatefulDataLoader`` resumes at the next index.

    Args:
        dataset (Sized | int): the dataset, or its length.
        num_replicas (int, optional): world size; defaults to ``composer.utils.dist.get_world_size()``.
        rank (int, optional): global rank; defaults to ``composer.utils.dist.get_global_rank()``.
        shuffle (bool): shuffle every epoch. Default: ``True``.
        seed (int): data seed in ``[0, 2**64 - 1]``, identical on every rank. Default: ``0``.
        drop_last (bool): drop the tail instead of padding. Default: ``False``.

    Example:
        >>> sampler = ResumableDistributedSampler(10, num_replicas=2, rank=1, seed=3)
        >>> sampler.set_epoch(1)
        >>> first = list(sampler)
        >>> sampler.set_sample_in_epoch(4)  # 4 samples of this epoch trained across all ranks
        >>> list(sampler) == first[2:]
        True
    """

    _repr_fields = ('dataset', 'num_replicas', 'rank', 'shuffle', 'seed', 'drop_last')

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.dataset = dataset
        self.dataset_len = dataset_length(dataset)
        super().__init__(num_replicas, rank, shuffle, seed, drop_last)

    def _rank_samples(self) -> int:
        """Indices per rank in a whole epoch (torch's definition)."""
        return samples_per_rank(self.dataset_len, self.num_replicas, self.drop_last)

    def _pass_end(self) -> int:
        return self.total_size

    def _offset_limit(self) -> int:
        # Elastic: a pass on W' ranks ends up to W' - 1 positions past the dataset length N (padding), so an offset
        # at or past the end of this pass means the epoch is over and is recorded as that end. Any W' up to
        # MAX_REPLICAS ends before N + MAX_REPLICAS: an offset past that came from no pass of this epoch.
        return self.dataset_len + MAX_REPLICAS - 1

    def _offset_rule(self) -> str:
        return f'a pass over the {self.dataset_len} samples on at most 2**62 ranks ends by then'

    def _iter_pass(self, offset: int) -> Iterator[int]:
        count = samples_per_rank(self.dataset_len, self.num_replicas, self.drop_last, offset)
        return self._iter_rank(offset, count, self.epoch, offset)

    def pass_positions(self) -> IndexArray:
        """The global positions the next pass reads, from this sampler's own rank, replicas and pending offset."""
        offset = self._next_offset
        count = samples_per_rank(self.dataset_len, self.num_replicas, self.drop_last, offset)
        return rank_positions(offset, self.rank, self.num_replicas, count)

    def pass_window(self, epoch: int) -> tuple[int, int]:
        """Every epoch reads positions from 0, and each rank reads torch's ``num_samples`` of them."""
        return 0, samples_per_rank(self.dataset_len, self.num_replicas, self.drop_last)

    def pass_indices(self) -> IndexArray:
        """The next pass's indices in one vectorised call from this sampler's own rank, replicas, seed and epoch."""
        return self.indices_at(self.pass_positions())

    def order_signature(self) -> dict[str, Any]:
        return {'sampler': type(self).__name__, 'dataset_len': self.dataset_len, 'shuffle': self.shuffle}

