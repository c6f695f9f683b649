"""The run summary rank 0 prints before training: batch math, epoch accounting, seed, sampler graph.

This module renders only; the numbers come from :mod:`composer_sampling.coverage` and the graph.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from composer_sampling.batching import BatchPlan
from composer_sampling.coverage import EpochAccounting, epoch_accounting
from composer_sampling.graph import active_root, iter_samplers, render_tree, sharding_nodes
from composer_sampling.protocols import ReportsSources, SubEpochs, supports

__all__ = ['render_rows', 'render_summary', 'summarize', 'summary_rows']


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
    if data_seed is None:
        seeds = sorted({node.seed for node in iter_samplers(root) if isinstance(getattr(node, 'seed', None), int)})
        seed_text = ', '.join(map(str, seeds)) + ' (held by the samplers)' if seeds else 'none'
    else:
        seed_text = f'{data_seed}' + (f' ({seed_source})' if seed_source else '')
    graph = list(iter_samplers(root))
    sub_epochs = next((node.sub_epochs_per_epoch for node in graph if supports(node, SubEpochs)), 1)
    sources = next((node.source_report() for node in graph if supports(node, ReportsSources)), [])
    rows = summary_rows(batch_plan, epoch_accounting(dataloader, ranks), seed_text, sub_epochs, sources)
    lines = ['composer-sampling run summary', *render_rows(rows), '  sampler graph (rank 0):']
    lines += ['    ' + line for line in render_tree(dataloader).splitlines()]
    return '\n'.join(lines)


def summary_rows(plan: BatchPlan | None, epoch: EpochAccounting, data_seed: str, sub_epochs: int = 1,
                 sources: list[dict[str, int]] | None = None) -> list[tuple[str, Any]]:
    """The summary's rows, the same for a training run (:func:`summarize`) and ``composer-sampling plan``.

    Example:
        >>> epoch = EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=3)
        >>> summary_rows(None, epoch, '7')[1]
        ('samples per epoch', '12 of 10 (2 padded, 0 dropped)')
    """
    rows: list[tuple[str, Any]] = []
    if plan is not None:
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
        ('data seed', data_seed),
    ]
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
