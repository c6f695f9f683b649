"""The DataLoader keywords that start a train loader's workers: on several ranks, from a fork server.

Example:
    >>> worker_start(0, 2, range(4))
    {'num_workers': 0}
"""

from __future__ import annotations

import multiprocessing
from typing import Any

__all__ = ['worker_start']


def worker_start(num_workers: int, world_size: int, dataset: Any) -> dict[str, Any]:
    """The DataLoader keywords that start ``num_workers`` workers: on several ranks, from a fork server.

    Forking a process that runs gloo's threads can copy a lock held by another thread, and the worker then hangs;
    a fork server of one thread avoids that. The dataset must then be picklable by name. One rank keeps ``fork``.

    Example:
        >>> worker_start(2, 1, range(4))
        {'num_workers': 2}
        >>> worker_start(2, 2, range(4))['multiprocessing_context'].get_start_method()
        'forkserver'
    """
    if num_workers == 0 or world_size == 1 or 'forkserver' not in multiprocessing.get_all_start_methods():
        return {'num_workers': num_workers}
    from composer_sampling.per_sample_rng import iter_datasets

    context = multiprocessing.get_context('forkserver')
    modules = ['__main__', 'torch', *dict.fromkeys(type(node).__module__ for node in iter_datasets(dataset))]
    context.set_forkserver_preload(modules)  # read once, when this process starts its fork server
    return {'num_workers': num_workers, 'multiprocessing_context': context}
