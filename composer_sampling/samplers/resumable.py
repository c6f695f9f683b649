"""A drop-in ``DistributedSampler`` with O(1) memory and exact, elastic mid-epoch resume."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DistributedSampler

from composer_sampling.order import MAX_SEED, iter_rank_indices, samples_per_rank
from composer_sampling.samplers.state import check_state, sampler_state
from composer_sampling.validate import check_bool, check_int, dataset_length, resolve_replicas

__all__ = ['ResumableDistributedSampler']


class ResumableDistributedSampler(DistributedSampler):
    """Torch's ``DistributedSampler``, without the list of N indices and with a start offset.

    The epoch's global order is a seeded bijection on ``[0, N)`` evaluated on
    demand (:func:`composer_sampling.order.permute`), so epoch start costs the
    same at N = 1e3 and N = 1e10. Rank ``r`` of ``W`` reads global positions
    ``r, r + W, ...``; ``len``, ``num_samples``, ``total_size``, padding (the
    start of the epoch's order repeated, at most ``W - 1`` samples) and
    ``drop_last`` (at most ``W - 1`` samples dropped) are torch's.

    A run can start mid-epoch at a *global* sample count
    (:meth:`set_sample_in_epoch`, which :class:`~composer_sampling.SamplerSync`
    calls from Composer's ``timestamp.sample_in_epoch``). Rank ``r`` then reads
    positions ``start + r, start + r + W, ...`` to the end of the epoch: the same
    samples the uninterrupted run would have read, on any world size. ``len()``
    stays the full epoch's count, as Composer expects.

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
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank)
        self.shuffle = check_bool('shuffle', shuffle)
        self.drop_last = check_bool('drop_last', drop_last)
        self._seed = check_int('seed', seed, 0, MAX_SEED)
        self.epoch = 0
        self.sample_in_epoch = 0

    @property
    def seed(self) -> int:
        """The data seed; must be identical on every rank."""
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._seed = check_int('seed', value, 0, MAX_SEED)

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """Indices per rank in a whole epoch (torch's definition)."""
        return samples_per_rank(self.dataset_len, self.num_replicas, self.drop_last)

    @property
    def total_size(self) -> int:  # type: ignore[override]
        """Indices across all ranks in a whole epoch, padding included."""
        return self.num_samples * self.num_replicas

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        count = samples_per_rank(self.dataset_len, self.num_replicas, self.drop_last, self.sample_in_epoch)
        return iter_rank_indices(
            self.dataset_len,
            rank=self.rank,
            num_replicas=self.num_replicas,
            count=count,
            start=self.sample_in_epoch,
            shuffle=self.shuffle,
            seed=self._seed,
            epoch=self.epoch,
        )

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's order; a new epoch starts at its beginning, the same epoch keeps its offset."""
        check_int('epoch', epoch)
        if epoch != self.epoch:
            self.sample_in_epoch = 0
        self.epoch = epoch

    def set_sample_in_epoch(self, sample_in_epoch: int) -> None:
        """Start the current epoch after ``sample_in_epoch`` samples trained across all ranks."""
        self.sample_in_epoch = check_int('sample_in_epoch', sample_in_epoch)

    def order_signature(self) -> dict[str, Any]:
        """What fixes the global order; a resume must not change it."""
        return {'sampler': type(self).__name__, 'dataset_len': self.dataset_len, 'shuffle': self.shuffle}

    def state_dict(self) -> dict[str, Any]:
        """Epoch, global start offset and seed: all that a resume needs."""
        return sampler_state(self, epoch=self.epoch, sample_in_epoch=self.sample_in_epoch, seed=self._seed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; refuses a state of another dataset length or shuffle setting."""
        values = check_state(self, state, ('epoch', 'sample_in_epoch', 'seed'))
        self.seed = values['seed']
        self.epoch = check_int('epoch', values['epoch'])
        self.set_sample_in_epoch(values['sample_in_epoch'])

    def __repr__(self) -> str:
        dataset = self.dataset
        if not isinstance(dataset, int):
            dataset = f'<{type(dataset).__name__} len={self.dataset_len}>'
        return (
            f'{type(self).__name__}(dataset={dataset}, num_replicas={self.num_replicas}, rank={self.rank}, '
            f'shuffle={self.shuffle}, seed={self._seed}, drop_last={self.drop_last})'
        )
