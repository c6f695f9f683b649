"""Which samples each batch of a mosaicml-streaming ``StreamingDataset`` holds, computed in the main process.

A ``StreamingDataset`` decides its samples inside the DataLoader's workers: each
worker asks ``generate_work`` for the epoch's partition (nodes x ranks x workers x
batches x batch size, ``-1`` for padding) and yields its own row; the DataLoader
then takes whole batches from the workers in turn. The ids never reach the main
process, and llm-foundry's collate functions drop anything but tokens. So
:class:`~composer_sampling.SampleLedger` computes the same partition in the main
process, with the dataset's own ``generate_work``, from the same epoch, resume
position and world. This follows streaming's internals as of mosaicml-streaming
0.12 (``SUPPORTED``); another version is refused rather than trusted.

Example:
    >>> import numpy as np
    >>> work = np.array([[[[[0, 1], [2, -1]], [[3, 4], [5, 6]]]]])  # 1 node, 1 rank, 2 workers, 2 batches of 2
    >>> [batch.tolist() for batch in worker_batches(work[0, 0], batch_size=2, drop_last=False)]
    [[0, 1], [3, 4], [2], [5, 6]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ['SUPPORTED', 'epoch_schedule', 'rank_batches', 'supported_version', 'worker_batches']

#: The mosaicml-streaming releases whose partition this module reproduces.
SUPPORTED = ('0.11.', '0.12.')


def supported_version() -> str | None:
    """The installed mosaicml-streaming version when this module follows it, else None."""
    import streaming

    version = getattr(streaming, '__version__', '')
    return version if version.startswith(SUPPORTED) else None


def worker_batches(per_worker: np.ndarray, batch_size: int, drop_last: bool) -> list[np.ndarray]:
    """The batches a DataLoader takes from workers in turn, each worker's samples ``per_worker[w]`` (``-1`` skipped).

    A worker whose samples are used up drops out of the turn, as torch's DataLoader skips it.
    """
    queues = []
    for row in per_worker:
        ids = row.reshape(-1)
        ids = ids[ids >= 0]
        cut = len(ids) - len(ids) % batch_size if drop_last else len(ids)
        queues.append([ids[start:start + batch_size] for start in range(0, cut, batch_size)])
    batches, turn = [], 0
    while any(queues):
        if queues[turn]:
            batches.append(queues[turn].pop(0))
        turn = (turn + 1) % len(queues)
    return batches


def _worlds(dataset: Any, num_workers: int) -> Any:
    from streaming.base.world import World

    ranks = dataset._parallel_rank_world
    workers = max(num_workers, 1)
    return World(ranks.num_nodes, ranks.ranks_per_node, workers, ranks.rank * workers)


def rank_batches(dataset: Any, epoch: int, num_workers: int, drop_last: bool) -> tuple[int, list[np.ndarray]]:
    """This rank's batches of ``epoch`` from where the dataset resumes; also the sample it resumes at.

    The resume position is the dataset's own (what Composer loaded into it), as its workers will read it.
    """
    from streaming.base.batching import generate_work

    world = _worlds(dataset, num_workers)
    epoch, sample_in_epoch = dataset._resume(world, epoch)
    work = generate_work(dataset.batching_method, dataset, world, epoch, sample_in_epoch)
    return sample_in_epoch, worker_batches(work[world.node, world.rank_of_node], dataset.batch_size, drop_last)


def epoch_schedule(dataset: Any, epoch: int, num_workers: int) -> np.ndarray:
    """Every sample of ``epoch`` on every rank, with its multiplicity: what the epoch is meant to train."""
    from streaming.base.batching import generate_work

    world = _worlds(dataset, num_workers)
    work = generate_work(dataset.batching_method, dataset, world, epoch, 0)
    ids = work.reshape(-1)
    return ids[ids >= 0].astype(np.int64)
