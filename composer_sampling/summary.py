"""The run summary rank 0 prints before training: batch math, epoch accounting, seed, sampler graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from composer_sampling.batching import BatchPlan
from composer_sampling.graph import active_root, iter_samplers, render_tree, sharding_nodes

__all__ = ['Coverage', 'EpochAccounting', 'count_coverage', 'epoch_accounting', 'render_summary']


@dataclass(frozen=True)
class EpochAccounting:
    """How one pass over the data uses the dataset across all ranks (a data epoch, for sub-epochs)."""

    dataset_len: int
    trained: int
    padded: int
    dropped: int
    steps: int


@dataclass(frozen=True)
class Coverage:
    """How a multiset of trained sample indices covers a dataset."""

    trained: int
    exactly_once: int
    repeated: int
    missing: int


def count_coverage(indices: np.ndarray, dataset_len: int) -> Coverage:
    """Samples trained once, trainings beyond the first (repeats), and samples never trained.

    Raises :class:`ValueError` for an index outside ``[0, dataset_len)``: it would
    otherwise be counted as a sample of another dataset.

    Example:
        >>> count_coverage(np.array([0, 1, 1]), 3)
        Coverage(trained=3, exactly_once=1, repeated=1, missing=1)
    """
    if indices.size and (indices.min() < 0 or indices.max() >= dataset_len):
        bad = int(indices[(indices < 0) | (indices >= dataset_len)][0])
        raise ValueError(f'sample index {bad} is outside [0, {dataset_len}), the range of dataset_len={dataset_len}')
    counts = np.bincount(indices, minlength=dataset_len)
    return Coverage(
        trained=int(indices.size),
        exactly_once=int(np.count_nonzero(counts == 1)),
        repeated=int(indices.size - np.count_nonzero(counts)),
        missing=int(np.count_nonzero(counts == 0)),
    )


def _dataset_len(node: Any) -> int | None:
    if isinstance(getattr(node, 'dataset_len', None), int):
        return node.dataset_len
    dataset = getattr(node, 'dataset', None)
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return None


def epoch_accounting(loader: DataLoader, world_size: int) -> EpochAccounting:
    """Samples trained, padded and dropped per epoch, read off the graph's sharding sampler.

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> loader = DataLoader(range(10), batch_size=2, sampler=ResumableDistributedSampler(10, 4, 0))
        >>> epoch_accounting(loader, world_size=4)
        EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=2)
    """
    dataset_len = len(loader.dataset)  # type: ignore[arg-type]
    trained = dataset_len
    for node in sharding_nodes(active_root(loader)):
        if callable(getattr(node, 'epoch_usage', None)):
            dataset_len, trained = node.epoch_usage()
            break
        node_len = _dataset_len(node)
        if node_len is not None and isinstance(getattr(node, 'num_samples', None), int):
            dataset_len, trained = node_len, node.num_samples * world_size
            break
    return EpochAccounting(
        dataset_len=dataset_len,
        trained=trained,
        padded=max(trained - dataset_len, 0),
        dropped=max(dataset_len - trained, 0),
        steps=len(loader),
    )


def render_summary(plan: BatchPlan, loader: DataLoader, data_seed: int, seed_source: str) -> str:
    """Text of the run summary of a recipe run."""
    return summarize(loader, batch_plan=plan, data_seed=data_seed, seed_source=seed_source)


def summarize(dataloader: DataLoader, batch_plan: BatchPlan | None = None, data_seed: int | None = None,
              seed_source: str | None = None) -> str:
    """The run summary for any DataLoader: batch math (when ``batch_plan`` is given), epoch accounting, seed, graph.

    ``data_seed`` defaults to the seed the graph's samplers hold now (what
    :class:`~composer_sampling.SamplerSync` set at fit start, or their own).

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> loader = DataLoader(range(10), batch_size=2, sampler=ResumableDistributedSampler(10, 1, 0, seed=5))
        >>> print(summarize(loader).splitlines()[2])
          samples per epoch  10 of 10 (0 padded, 0 dropped)
    """
    root = active_root(dataloader)
    shards = sharding_nodes(root)
    ranks = batch_plan.data_parallel if batch_plan else (shards[0].num_replicas if shards else 1)
    epoch = epoch_accounting(dataloader, ranks)
    rows: list[tuple[str, Any]] = []
    if batch_plan is not None:
        plan = batch_plan
        rows.append(('world size', plan.world_size))
        if plan.replication > 1:
            rows.append(('replication', f'{plan.replication} ({plan.data_parallel} data-parallel ranks; each group '
                                        f'of {plan.replication} reads the same data)'))
        divisor = 'world size' if plan.replication == 1 else 'data-parallel ranks'
        rows += [
            ('global batch', plan.global_batch),
            ('device batch', f'{plan.device_batch} (global batch / {divisor})'),
            ('microbatch', plan.microbatch),
            ('accumulation steps', f'{plan.accumulation_steps} (device batch / microbatch)'),
        ]
    rows += [
        ('steps per epoch', epoch.steps),
        ('samples per epoch', f'{epoch.trained} of {epoch.dataset_len} ({epoch.padded} padded, {epoch.dropped} '
                              'dropped)'),
    ]
    if data_seed is None:
        seeds = sorted({node.seed for node in iter_samplers(root) if isinstance(getattr(node, 'seed', None), int)})
        rows.append(('data seed', ', '.join(map(str, seeds)) + ' (held by the samplers)' if seeds else 'none'))
    else:
        rows.append(('data seed', f'{data_seed}' + (f' ({seed_source})' if seed_source else '')))
    for node in iter_samplers(root):
        if isinstance(getattr(node, 'sub_epochs_per_epoch', None), int):
            rows.append(('sub-epochs', f'{node.sub_epochs_per_epoch} trainer epochs make one pass over the data '
                                       '(samples per epoch above are per pass)'))
        if callable(getattr(node, 'source_report', None)):
            for row in node.source_report():
                rows.append((f'source {row["source"]}', f'{row["used"]} of {row["size"]} used per epoch, '
                                                      f'{row["trimmed"]} trimmed, {row["steps"]} global steps'))
    width = max(len(name) for name, _ in rows)
    lines = ['composer-sampling run summary']
    lines += [f'  {name:<{width}}  {value}' for name, value in rows]
    lines.append('  sampler graph (rank 0):')
    lines += ['    ' + line for line in render_tree(dataloader).splitlines()]
    return '\n'.join(lines)
