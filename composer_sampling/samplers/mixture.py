"""Several concatenated sources; every global step drawn from one source."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from composer_sampling._validate import valid_int
from composer_sampling.permutation import MAX_DATASET_LEN, Permutation, derive_seed
from composer_sampling.positions import IndexArray, iter_mapped_positions, mixture_schedule, rank_count
from composer_sampling.samplers._base import OrderedSampler

__all__ = ['MixtureDistributedSampler']

_CHUNK = 1 << 18
#: Runs shorter than this are served from one block of this many positions computed at once (the first chunks
#: of a pass are short, and a short run costs about as much as this: numpy calls, not arithmetic, dominate).
_READ_AHEAD = 1 << 14


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
    cumulative sizes). Time per epoch is O(total samples), memory O(global steps) (and
    the round tables of each source's :class:`~composer_sampling.permutation.Permutation`,
    O(sqrt(source size)) entries, that speed up the shuffle).
    A resume must keep the sources and the global batch (they fix the schedule); the
    world size may change with them. The sampler is built from sizes, not datasets,
    so its ``dataset`` (which torch's ``DistributedSampler`` users read, Composer's
    evaluation for one) is the index space ``range(sum(source_sizes))``.

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
        self.source_sizes = [valid_int(f'source_sizes[{k}]', size, minimum=0) for k, size in enumerate(source_sizes)]
        if sum(self.source_sizes) > MAX_DATASET_LEN:
            raise ValueError(
                f'dataset length (the sum of source_sizes) must be in the interval [1, 2**62], got '
                f'{sum(self.source_sizes)}',
            )
        self.batch_size = valid_int('batch_size', batch_size, minimum=1)
        super().__init__(num_replicas, rank, shuffle, seed, drop_last=True)  # it trims every source
        self.dataset_len = sum(self.source_sizes)
        self.dataset = range(self.dataset_len)  # the index space: len(sampler.dataset), as torch's users read it
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
        self._schedule: tuple[IndexArray, IndexArray] = (np.empty(0, np.int64), np.empty(0, np.int64))
        self._permutations: dict[int, Permutation] = {}
        self._ahead: tuple[tuple[int, int, int] | None, int, IndexArray] = (None, 0, np.empty(0, np.int64))

    def _rank_samples(self) -> int:
        """Indices per rank in an epoch: whole global steps only."""
        return sum(self.steps) * self.batch_size

    def source_report(self) -> list[dict[str, int]]:
        """Per source: its size, the samples used and trimmed each epoch, and its global steps."""
        return [
            {'source': k, 'size': size, 'used': steps * self.global_batch,
             'trimmed': size - steps * self.global_batch, 'steps': steps}
            for k, (size, steps) in enumerate(zip(self.source_sizes, self.steps, strict=True))
        ]

    def schedule(self) -> tuple[IndexArray, IndexArray]:
        """This epoch's source of every global step, and the step's count within its source."""
        key = (self.seed, self.epoch)
        if self._schedule_key != key:
            self._schedule = mixture_schedule(self.steps, shuffle=self.shuffle, seed=self.seed, epoch=self.epoch)
            self._schedule_key = key
            self._permutations = {}
        return self._schedule

    def _permute_source(self, k: int, picked: IndexArray) -> IndexArray:
        """Source ``k``'s own permutation of this epoch at ``picked``; held for the epoch (its tables with it)."""
        permutation = self._permutations.get(k)
        if permutation is None:
            permutation = Permutation.cached(self.source_sizes[k], derive_seed(self.seed, k), self.epoch)
            self._permutations[k] = permutation
        return permutation(picked)

    def indices_at(self, positions: IndexArray) -> IndexArray:
        """Concatenated-dataset indices at global positions of this epoch's mixture order."""
        sources, within = self.schedule()
        step, column = np.divmod(positions, self.global_batch)
        source = sources[step]
        in_source = within[step] * self.global_batch + column
        out: IndexArray = np.empty_like(in_source)
        for k in np.flatnonzero(np.bincount(source, minlength=len(self.steps))).tolist():
            mask = source == k
            picked = in_source[mask]
            if self.shuffle:
                picked = self._permute_source(k, picked)
            out[mask] = picked + self.offsets[k]
        return out

    def positions_of(self, indices: IndexArray) -> IndexArray:
        """The inverse of :meth:`indices_at`: the global position of each of ``indices`` in this epoch's mixture
        order, or -1 for a sample that the trim leaves out of this epoch."""
        sources, within = self.schedule()
        indices = np.asarray(indices, dtype=np.int64)
        source = np.searchsorted(self.offsets, indices, side='right') - 1
        out = np.full(len(indices), -1, dtype=np.int64)
        for k in np.unique(source).tolist():
            mask = source == k
            place = indices[mask] - self.offsets[k]
            if self.shuffle:
                place = Permutation.cached(self.source_sizes[k], derive_seed(self.seed, k), self.epoch).inverse(place)
            steps = np.flatnonzero(sources == k)
            step_of = np.empty(len(steps), dtype=np.int64)
            step_of[within[steps]] = steps  # the global step of each of the source's steps
            count, column = np.divmod(place, self.global_batch)
            kept = count < len(steps)
            out[mask] = np.where(kept, step_of[np.minimum(count, max(len(steps) - 1, 0))] * self.global_batch + column,
                                 -1) if len(steps) else -1
        return out

    def pass_window(self, epoch: int) -> tuple[int, int]:
        """Every epoch reads positions from 0: each rank reads ``batch_size`` of every global step."""
        return 0, sum(self.steps) * self.batch_size

    def _rank_indices(self, positions: IndexArray) -> IndexArray:
        """:meth:`indices_at` of a run of positions ``p, p + W, p + 2W, ...`` (one rank's chunk of a pass).

        A short run is cut from a block of ``_READ_AHEAD`` positions computed at once and
        kept for the runs that follow it; the values depend on the positions, seed and
        epoch only, so they are the same as computed one run at a time.
        """
        count = len(positions)
        width = self.num_replicas
        first = int(positions[0]) if count else 0
        if not count or int(positions[-1]) != first + (count - 1) * width:
            return self.indices_at(positions)
        key, block_first, block = self._ahead
        skip, offset = divmod(first - block_first, width)
        if key == (self.seed, self.epoch, width) and not offset and skip >= 0 and skip + count <= len(block):
            return block[skip:skip + count]
        if count >= _READ_AHEAD:
            return self._run_indices(first, count)
        block = self._run_indices(first, max(count, min(_READ_AHEAD, rank_count(first, self._pass_end(), 0, width))))
        self._ahead = ((self.seed, self.epoch, width), first, block)
        return block[:count]

    def _run_indices(self, first: int, count: int) -> IndexArray:
        """Indices at positions ``first + W * i``, ``i < count``, a global step at a time.

        Such a run takes the same ``batch_size`` columns ``first % W + W * j`` of every
        global step it crosses, so each step's source is looked up once and its indices
        form a row; rows are computed whole (the first and last step may be partial) and
        the run is cut out of them. No division per index, no mask per source.
        """
        width = self.num_replicas
        row, column = divmod(first, width)
        first_step, lead = divmod(row, self.batch_size)
        last_step = (row + count - 1) // self.batch_size
        sources, within = self.schedule()
        step_source = sources[first_step:last_step + 1]
        step_base = within[first_step:last_step + 1] * self.global_batch
        columns = np.arange(column, self.global_batch, width, dtype=np.int64)
        present = np.flatnonzero(np.bincount(step_source, minlength=len(self.steps))).tolist()
        out = np.empty((len(step_source), self.batch_size), dtype=np.int64)
        for k in present:
            rows = np.flatnonzero(step_source == k) if len(present) > 1 else slice(None)
            picked = (step_base[rows][:, None] + columns).ravel()
            if self.shuffle:
                picked = self._permute_source(k, picked)
            out[rows] = (picked + self.offsets[k]).reshape(-1, self.batch_size)
        return out.ravel()[lead:lead + count]

    def _pass_end(self) -> int:
        return sum(self.steps) * self.global_batch

    def _iter_pass(self, offset: int) -> Iterator[int]:
        count = rank_count(offset, self._pass_end(), self.rank, self.num_replicas)
        return iter_mapped_positions(self._rank_indices, rank=self.rank, num_replicas=self.num_replicas, count=count,
                                     start=offset, chunk=_CHUNK, cursor=self._cursor_for(offset, count))

    def epoch_usage(self) -> tuple[int, int]:
        return self.dataset_len, sum(self.steps) * self.global_batch

    def order_signature(self) -> dict[str, Any]:
        return {
            'sampler': type(self).__name__,
            'source_sizes': list(self.source_sizes),
            'shuffle': self.shuffle,
            'global_batch': self.global_batch,
        }

