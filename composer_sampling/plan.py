"""Dry-run a recipe at any world size: compute every rank's order and check the guarantees.

No training, no process group and no sample is read: each rank's train loader is
built with explicit ``num_replicas``/``rank``, its sampler graph gets the epoch as
SamplerSync would set it, and the indices it would yield are collected.

Example:
    >>> from composer_sampling.recipe import load_recipe
    >>> report = plan_recipe(load_recipe(None, ['global_train_batch_size=64']), world_size=4, epochs=1)
    >>> report.ok, report.epochs[0].missing
    (True, 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from composer_sampling.batching import BatchPlan
from composer_sampling.build import (
    Placement,
    batch_plan,
    build_callbacks,
    build_datasets,
    build_train_loader,
    data_seed_of,
)
from composer_sampling.graph import active_root, iter_samplers, render_tree, set_epoch_everywhere, sharding_problem
from composer_sampling.recipe import Recipe
from composer_sampling.summary import EpochAccounting, count_coverage, epoch_accounting

__all__ = ['EpochCoverage', 'PlanReport', 'plan_recipe', 'rank_indices']


@dataclass(frozen=True)
class EpochCoverage:
    """How one pass over the data covers the dataset across all ranks."""

    epoch: int
    trained: int
    exactly_once: int
    repeated: int
    missing: int
    overlap: int
    complete: bool
    problem: str | None


@dataclass
class PlanReport:
    """Everything ``composer-sampling plan`` prints; ``problems`` empty means every guarantee holds."""

    plan: BatchPlan
    accounting: EpochAccounting
    data_seed: int
    tree: str
    sources: list[dict[str, int]]
    sub_epochs: int
    epochs: list[EpochCoverage] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def rank_indices(loader: DataLoader, epoch: int) -> np.ndarray:
    """The sample indices one rank's loader would train in ``epoch``, without reading a sample."""
    set_epoch_everywhere(loader, epoch)
    root = active_root(loader)
    items = iter(root)
    if loader.batch_sampler is not None:
        items = chain.from_iterable(items)
    return np.fromiter(items, dtype=np.int64)


def _coverage(epoch: int, per_rank: list[np.ndarray], accounting: EpochAccounting, complete: bool) -> EpochCoverage:
    everything = np.concatenate(per_rank) if per_rank else np.empty(0, np.int64)
    coverage = count_coverage(everything, accounting.dataset_len)
    repeated, missing = coverage.repeated, coverage.missing
    ranks_per_sample = np.bincount(np.concatenate([np.unique(indices) for indices in per_rank]),
                                   minlength=accounting.dataset_len)
    overlap = int(np.count_nonzero(ranks_per_sample > 1))
    problem = None
    if repeated > accounting.padded:
        problem = (f'exactly once per epoch: {repeated} samples trained again in epoch {epoch}, padding allows '
                   f'{accounting.padded}')
    elif overlap > accounting.padded:
        problem = f'no overlap between ranks: {overlap} samples trained by several ranks in epoch {epoch}'
    elif complete and missing != accounting.dropped:
        problem = (f'exactly once per epoch: {missing} samples never trained in epoch {epoch}, the sampler drops '
                   f'{accounting.dropped}')
    return EpochCoverage(epoch, coverage.trained, coverage.exactly_once, repeated, missing, overlap, complete,
                         problem)


def plan_recipe(recipe: Recipe, world_size: int, epochs: int) -> PlanReport:
    """Build every rank's loader for ``world_size`` and check ``epochs`` trainer epochs of their orders.

    Raises :class:`~composer_sampling.recipe.RecipeError` for fields that cannot
    run at this world size (the batch math, a sampler option).
    """
    plan = batch_plan(recipe, world_size)
    data_seed = data_seed_of(recipe, build_callbacks(recipe))
    dataset, _ = build_datasets(recipe)
    # One loader per data-parallel rank; with replication R, ranks r and r' of one group share loader r // R.
    loaders = [build_train_loader(recipe, dataset, plan, Placement(plan.data_parallel, rank, data_seed))
               for rank in range(plan.data_parallel)]
    first = loaders[0]
    graph = list(iter_samplers(active_root(first)))
    sub_epochs = next((node.sub_epochs_per_epoch for node in graph if hasattr(node, 'sub_epochs_per_epoch')), 1)
    sources = next((node.source_report() for node in graph if hasattr(node, 'source_report')), [])
    report = PlanReport(plan, epoch_accounting(first, plan.data_parallel), data_seed, render_tree(first), sources,
                        sub_epochs)

    problems = [(rank, text) for rank in range(world_size)
                if (text := sharding_problem(active_root(loaders[rank // plan.replication]), world_size, rank,
                                             plan.replication))]
    if problems:
        rank, text = problems[0]
        report.problems.append(f'real sharding (rank {rank}): {text}')
        return report
    seeds = {tuple(_seeds(loader)) for loader in loaders}
    if len(seeds) > 1:
        report.problems.append(f'identical seeds: the ranks draw with different seeds {sorted(seeds)}')

    for data_epoch in range(-(-epochs // sub_epochs)):
        trainer_epochs = range(data_epoch * sub_epochs, min((data_epoch + 1) * sub_epochs, epochs))
        per_rank = [np.concatenate([rank_indices(loader, e) for e in trainer_epochs]) for loader in loaders]
        coverage = _coverage(data_epoch, per_rank, report.accounting, len(trainer_epochs) == sub_epochs)
        report.epochs.append(coverage)
        if coverage.problem:
            report.problems.append(coverage.problem)
    return report


def _seeds(loader: DataLoader) -> list[Any]:
    return [node.seed for node in iter_samplers(loader) if hasattr(node, 'seed')]
