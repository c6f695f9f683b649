"""Several concatenated sources; every global step drawn from one source."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from composer_sampling.order import (
    MAX_DATASET_LEN,
    derive_seed,
    iter_mapped_positions,
    mixture_schedule,
    permute,
    rank_count,
)
from composer_sampling.samplers.base import OrderedSampler
from composer_sampling.validate import check_int

__all__ = ['MixtureDistributedSampler']

_CHUNK = 1 << 18


class MixtureDistributedSampler(OrderedSampler):
    """Indices into the concatenation of sources, one source per global optimizer step.

    Multimodal and multi-dataset training wants every optimizer step drawn from one
    source, every rank on the same source at the same step, and no partial steps.
    A global step is ``num_replicas * batch_size`` samples, where ``batch_size`` is
    the per-device batch the DataLoader yields (in Composer it already contains the
    gradient-accumulation microbatches). Each epoch:

    * every source is trimmed to whole global steps; with ``shuffle`` the source is
      re-permuted every epoch, so different samples are trimmed each time;
    * the steps of each source are spread evenly over the epoch;
    * within a step, rank ``r`` takes the step's positions ``r, r + W, ...``, so each
      rank sees a different share of every source each epoch.

    Indices are offsets into ``torch.utils.data.ConcatDataset`` of the sources (the
    cumulative sizes). Time per epoch is O(total samples), memory O(global steps).
    A resume must keep the sources and the global batch (they fix the schedule); the
    world size may change with them.

    Args:
        source_sizes (Sequence[int]): length of every source, in concatenation order.
        batch_size (int): per-device batch, the DataLoader's ``batch_size``.
        num_replicas, rank, shuffle, seed: as for
            :class:`~composer_sampling.ResumableDistributedSampler`.

    Example:
        >>> sampler = MixtureDistributedSampler([10, 6, 5], batch_size=2, num_replicas=2, rank=0)
        >>> [row['trimmed'] for row in sampler.source_report()]  # global step of 4 samples
        [2, 2, 1]
        >>> len(sampler)  # (2 + 1 + 1) steps of 2 samples for this rank
        8
    """

    _repr_fields = ('source_sizes', 'batch_size', 'num_replicas', 'rank', 'shuffle', 'seed')

    def __init__(
        self,
        source_sizes: Sequence[int],
        batch_size: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if isinstance(source_sizes, np.ndarray):
            source_sizes = source_sizes.tolist()
        if isinstance(source_sizes, (str, bytes)) or not isinstance(source_sizes, Sequence) or not source_sizes:
            raise TypeError(f'source_sizes must be a non-empty sequence of ints, got {source_sizes!r}')
        self.source_sizes = [check_int(f'source_sizes[{k}]', size, minimum=0) for k, size in enumerate(source_sizes)]
        if sum(self.source_sizes) > MAX_DATASET_LEN:
            raise ValueError(
                f'dataset length (the sum of source_sizes) must be in the interval [1, 2**62], got '
                f'{sum(self.source_sizes)}',
            )
        self.batch_size = check_int('batch_size', batch_size, minimum=1)
        super().__init__(num_replicas, rank, shuffle, seed, drop_last=True)  # it trims every source
        self.dataset_len = sum(self.source_sizes)
        self.global_batch = self.num_replicas * self.batch_size
        self.steps = [size // self.global_batch for size in self.source_sizes]
        if not sum(self.steps):
            raise ValueError(
                f'every source is smaller than one global step of {self.global_batch} samples (num_replicas '
                f'{self.num_replicas} x batch_size {self.batch_size}); source_sizes={self.source_sizes}. Use a '
                'smaller batch or larger sources',
            )
        self.offsets = np.concatenate([[0], np.cumsum(self.source_sizes)[:-1]]).astype(np.int64)
        self._schedule_key: tuple[int, int] | None = None
        self._schedule: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0, np.int64))

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """Indices per rank in an epoch: whole global steps only."""
        return sum(self.steps) * self.batch_size

    def source_report(self) -> list[dict[str, int]]:
        """Per source: its size, the samples used and trimmed each epoch, and its global steps."""
        return [
            {'source': k, 'size': size, 'used': steps * self.global_batch,
             'trimmed': size - steps * self.global_batch, 'steps': steps}
            for k, (size, steps) in enumerate(zip(self.source_sizes, self.steps, strict=True))
        ]

    def schedule(self) -> tuple[np.ndarray, np.ndarray]:
        """This epoch's source of every global step, and the step's count within its source."""
        key = (self.seed, self.epoch)
        if self._schedule_key != key:
            self._schedule = mixture_schedule(self.steps, shuffle=self.shuffle, seed=self.seed, epoch=self.epoch)
            self._schedule_key = key
        return self._schedule

    def indices_at(self, positions: np.ndarray) -> np.ndarray:
        """Concatenated-dataset indices at global positions of this epoch's mixture order."""
        sources, within = self.schedule()
        step, column = np.divmod(positions, self.global_batch)
        source = sources[step]
        in_source = within[step] * self.global_batch + column
        out = np.empty_like(in_source)
        for k in np.flatnonzero(np.bincount(source, minlength=len(self.steps))).tolist():
            mask = source == k
            picked = in_source[mask]
            if self.shuffle:
                picked = permute(picked, self.source_sizes[k], derive_seed(self.seed, k), self.epoch)
            out[mask] = picked + self.offsets[k]
        return out

    def _pass_end(self) -> int:
        return sum(self.steps) * self.global_batch

    def _iter_pass(self, start: int) -> Iterator[int]:
        count = rank_count(start, self._pass_end(), self.rank, self.num_replicas)
        return iter_mapped_positions(self.indices_at, rank=self.rank, num_replicas=self.num_replicas, count=count,
                                     start=start, chunk=_CHUNK, cursor=self._cursor_for(start, count))

    def epoch_usage(self) -> tuple[int, int]:
        return self.dataset_len, sum(self.steps) * self.global_batch

    def order_signature(self) -> dict[str, Any]:
        return {
            'sampler': type(self).__name__,
            'source_sizes': list(self.source_sizes),
            'shuffle': self.shuffle,
            'global_batch': self.global_batch,
        }
