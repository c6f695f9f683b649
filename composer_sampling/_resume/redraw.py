"""Continuing an epoch of a graph whose order nothing of ours can set, once its trained batches are drawn again.

A node with neither ``set_epoch``, nor a ``generator``, nor a sample offset (a user's
batch sampler that groups the batches of a seeded ``BatchSampler``, say) may still
draw the same index lists in every pass: its order is then a function of the nodes
below, which are seeded. Whether it does cannot be read off the node, but it can be
checked. While a fit trains, a :class:`BatchChain` listens to the tap at the top of
the loader and keeps a running digest of the index lists this rank's pass yielded; a
checkpoint keeps the digest of the lists trained so far. At the resume, the tap draws
that many lists again and drops them (indices only: no sample is loaded), and
:func:`head_check` compares their digest with the checkpoint's before the pass yields
its first batch. The same lists continue the epoch exactly; other lists are refused.

Example:
    >>> chain = BatchChain()
    >>> for batch in ([3, 1], [0, 2], [5, 4]):
    ...     chain(1, batch)
    >>> saved = chain.after(2)  # a checkpoint after two batches
    >>> head_check(saved, 'rank 0')(iter([[3, 1], [0, 2]]))  # the same lists drawn again: nothing to say
    >>> head_check(saved, 'rank 0')(iter([[1, 3], [0, 2]]))
    Traceback (most recent call last):
    ...
    composer_sampling.errors.DataOrderError: SamplerSync: drawn again for rank 0, the 2 index lists \
trained before the checkpoint come out different, so the order of this epoch depends on something besides the \
seed and the epoch; the rest of the epoch would repeat or skip samples. Give the sampler that decides the order \
set_epoch(epoch), or resume from a checkpoint saved at an epoch's end
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterator

from composer_sampling._graph.index_tap import HeadCheck
from composer_sampling.errors import DataOrderError

__all__ = ['KEPT', 'BatchChain', 'head_check']

#: How many of the latest digests a chain keeps: a checkpoint asks for the batches trained, which trail the lists
#: drawn by at most the DataLoader's prefetch (``prefetch_factor x num_workers`` lists, a few dozen at most).
KEPT = 4096

_EMPTY = hashlib.blake2b(b'', digest_size=16).hexdigest()


def _next(digest: str, batch: list[int]) -> str:
    """The digest after one more index list."""
    step = hashlib.blake2b(bytes.fromhex(digest), digest_size=16)
    step.update(len(batch).to_bytes(8, 'little'))
    for index in batch:
        step.update(int(index).to_bytes(8, 'little', signed=True))
    return step.hexdigest()


class BatchChain:
    """The running digest of the index lists one rank's passes yield: a listener of the tap at the top of its loader.

    A new pass starts a new chain, unless :meth:`continue_from` said where the next one starts (a resumed pass,
    whose first lists were dropped after :func:`head_check`).
    """

    def __init__(self) -> None:
        self._pass: int | None = None
        self._count = 0
        self._digest = _EMPTY
        self._recent: collections.deque[tuple[int, str]] = collections.deque(maxlen=KEPT)
        self._start: tuple[int, str] | None = None

    def __call__(self, number: int, batch: list[int]) -> None:
        if number != self._pass:
            self._pass = number
            self._count, self._digest = self._start or (0, _EMPTY)
            self._start = None
            self._recent.clear()
            self._recent.append((self._count, self._digest))
        self._digest = _next(self._digest, batch)
        self._count += 1
        self._recent.append((self._count, self._digest))

    def continue_from(self, batches: int, digest: str) -> None:
        """The next pass starts after ``batches`` lists whose digest is ``digest``."""
        self._start = (batches, digest)

    def after(self, batches: int) -> str | None:
        """The digest of the current pass's first ``batches`` lists; None when the chain no longer holds it."""
        if batches == 0:
            return _EMPTY
        for count, digest in reversed(self._recent):
            if count == batches:
                return digest
        return None


def head_check(expected: str, who: str, chain: BatchChain | None = None) -> HeadCheck:
    """The check a resumed pass runs on the lists it drops: their digest must be ``expected``.

    On success ``chain`` (this rank's listener) continues from there. The refusal names ``who`` (this rank).
    """

    def check(batches: Iterator[list[int]]) -> None:
        digest, count = _EMPTY, 0
        for batch in batches:
            digest, count = _next(digest, batch), count + 1
        if digest != expected:
            raise DataOrderError(
                f'SamplerSync: drawn again for {who}, the {count} index lists trained before the checkpoint come out '
                'different, so the order of this epoch depends on something besides the seed and the epoch; the '
                'rest of the epoch would repeat or skip samples. Give the sampler that decides the order '
                "set_epoch(epoch), or resume from a checkpoint saved at an epoch's end")
        if chain is not None:
            chain.continue_from(count, digest)

    return check
