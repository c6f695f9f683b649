"""The run summary rank 0 prints before training: batch math, epoch accounting, seed, data fingerprint, sampler graph.

The numbers come from :mod:`composer_sampling._proofs.coverage` and from one snapshot of the
graph (:mod:`composer_sampling._graph.snapshot`); this module lays them out.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._fingerprint import dataset_fingerprint
from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import render_tree
from composer_sampling._proofs.coverage import EpochAccounting
from composer_sampling.batching import BatchSizes

__all__ = ['fingerprint_text', 'render_rows', 'summarize', 'summary_rows']


def summarize(dataloader: DataLoader, batch_sizes: BatchSizes | None = None, data_seed: int | None = None,
              seed_source: str | None = None, graph: GraphSnapshot | None = None,
              run_rows: list[tuple[str, Any]] | None = None) -> str:
    """The run summary for any DataLoader: batch math (when ``batch_sizes`` is given), epoch accounting, seed, graph.

    ``data_seed`` defaults to the seed the graph's samplers hold now (what
    :class:`~composer_sampling.SamplerSync` set at fit start, or their own). ``graph``
    is the loader's snapshot when the caller has one (else it is taken here); ``run_rows``
    (name, value) describe the training run around the data (device, precision...). A
    DataLoader over an iterable dataset (which orders itself) gets a short summary
    of its dataset and seed.

    Raises:
        TypeError: ``dataloader`` is not a torch DataLoader.

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> loader = DataLoader(range(10), batch_size=2, sampler=ResumableDistributedSampler(10, 1, 0, seed=5))
        >>> print(summarize(loader).splitlines()[2])
          samples per epoch  10 of 10 (0 padded, 0 dropped)
    """
    if not isinstance(dataloader, DataLoader):
        raise TypeError(f'summarize expects a torch DataLoader (or a subclass), got {type(dataloader).__name__}')
    graph = take_snapshot(dataloader) if graph is None else graph
    if not graph.map_style:
        return _iterable_summary(dataloader, data_seed, seed_source, run_rows or [])
    shards = graph.sharding()
    ranks = batch_sizes.data_parallel if batch_sizes else (shards[0].num_replicas if shards else 1)
    if data_seed is None:
        seeds = sorted({node.seed for node in graph.active if isinstance(getattr(node, 'seed', None), int)})
        seed_text = ', '.join(map(str, seeds)) + ' (held by the samplers)' if seeds else 'none'
    else:
        seed_text = f'{data_seed}' + (f' ({seed_source})' if seed_source else '')
    accounting = graph.accounting(ranks)
    rows = summary_rows(batch_sizes, accounting, seed_text, graph.sub_epochs(), graph.sources(),
                        fingerprint_text(dataloader.dataset)) + (run_rows or [])
    lines = ['composer-sampling run summary', *render_rows(rows), '  sampler graph (rank 0):']
    lines += ['    ' + line for line in render_tree(dataloader, graph.active).splitlines()]
    return '\n'.join(lines)


def _iterable_summary(dataloader: DataLoader, data_seed: int | None, seed_source: str | None,
                      run_rows: list[tuple[str, Any]]) -> str:
    """The summary of a DataLoader over an iterable dataset: no sampler orders it, the dataset does."""
    dataset = dataloader.dataset
    if data_seed is None:
        shuffle_seed = getattr(dataset, 'shuffle_seed', None)
        seed_text = f'{shuffle_seed} (the dataset\'s shuffle_seed)' if shuffle_seed is not None else 'none'
    else:
        seed_text = f'{data_seed}' + (f' ({seed_source})' if seed_source else '')
    rows: list[tuple[str, Any]] = [
        ('dataset', f'{type(dataset).__name__}, an iterable dataset that orders itself'),
        ('device batch', dataloader.batch_size),
        ('data seed', seed_text),
        ('data fingerprint', fingerprint_text(dataset)),
        *run_rows,
    ]
    return '\n'.join(['composer-sampling run summary', *render_rows(rows)])


def fingerprint_text(dataset: Any) -> str:
    """The dataset's fingerprint as the summary prints it, or why there is none (its own one is not a string or
    raises, or its chain of datasets loops).

    Example:
        >>> fingerprint_text(range(3)).endswith('class and length only; its content is not covered, which a '
        ...                                       'fingerprint attribute on the dataset would give')
        True
    """
    try:
        return str(dataset_fingerprint(dataset))
    except (TypeError, ValueError) as error:
        return f'none: {error}'


def summary_rows(batch_sizes: BatchSizes | None, epoch: EpochAccounting, data_seed: str, sub_epochs: int = 1,
                 sources: list[dict[str, int]] | None = None, fingerprint: str | None = None) -> list[tuple[str, Any]]:
    """The summary's rows, the same for a training run (:func:`summarize`) and ``composer-sampling plan``.

    Example:
        >>> epoch = EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=3)
        >>> summary_rows(None, epoch, '7')[1]
        ('samples per epoch', '12 of 10 (2 padded, 0 dropped)')
    """
    rows: list[tuple[str, Any]] = []
    if batch_sizes is not None:
        rows.append(('world size', batch_sizes.world_size))
        if batch_sizes.replication > 1:
            rows.append(('replication', f'{batch_sizes.replication} ({batch_sizes.data_parallel} data-parallel ranks; '
                                        f'each group of {batch_sizes.replication} reads the same data)'))
        divisor = 'world size' if batch_sizes.replication == 1 else 'data-parallel ranks'
        rows += [
            ('global batch', batch_sizes.global_batch),
            ('device batch', f'{batch_sizes.device_batch} (global batch / {divisor})'),
            ('microbatch', batch_sizes.microbatch),
            ('accumulation steps', f'{batch_sizes.accumulation_steps} (device batch / microbatch)'),
        ]
    rows += [
        ('steps per epoch', epoch.steps),
        ('samples per epoch', f'{epoch.trained} of {epoch.dataset_len} ({epoch.padded} padded, {epoch.dropped} '
                              'dropped)'),
        ('data seed', data_seed),
    ]
    if fingerprint is not None:
        rows.append(('data fingerprint', fingerprint))
    if sub_epochs > 1:
        rows.append(('sub-epochs', f'{sub_epochs} trainer epochs make one pass over the data (samples per epoch '
                                   'above are per pass)'))
    for row in sources or []:
        rows.append((f'source {row["source"]}', f'{row["used"]} of {row["size"]} used per epoch, {row["trimmed"]} '
                                                f'trimmed, {row["steps"]} global steps'))
    return rows


def render_rows(rows: list[tuple[str, Any]]) -> list[str]:
    """The rows as aligned, indented lines."""
    width = max(len(name) for name, _ in rows)
    return [f'  {name:<{width}}  {value}' for name, value in rows]
