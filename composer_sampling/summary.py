"""The run summary rank 0 prints before training: batch math, epoch accounting, seed, sampler graph.

This module renders only; the numbers come from :mod:`composer_sampling.coverage` and the graph.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from composer_sampling.batching import BatchPlan
from composer_sampling.coverage import epoch_accounting
from composer_sampling.graph import active_root, iter_samplers, render_tree, sharding_nodes
from composer_sampling.protocols import ReportsSources, SubEpochs, supports

__all__ = ['render_summary', 'summarize']


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
        if supports(node, SubEpochs):
            rows.append(('sub-epochs', f'{node.sub_epochs_per_epoch} trainer epochs make one pass over the data '
                                       '(samples per epoch above are per pass)'))
        if supports(node, ReportsSources):
            for row in node.source_report():
                rows.append((f'source {row["source"]}', f'{row["used"]} of {row["size"]} used per epoch, '
                                                      f'{row["trimmed"]} trimmed, {row["steps"]} global steps'))
    width = max(len(name) for name, _ in rows)
    lines = ['composer-sampling run summary']
    lines += [f'  {name:<{width}}  {value}' for name, value in rows]
    lines.append('  sampler graph (rank 0):')
    lines += ['    ' + line for line in render_tree(dataloader).splitlines()]
    return '\n'.join(lines)
