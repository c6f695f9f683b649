"""``composer-sampling plan``: dry-run a recipe at any world size and check the guarantees.

The recipe is checked by ``train``'s own pass; every data-parallel rank's train loader is built and
:func:`composer_sampling._proofs.plan.plan_loaders` proves their coverage.

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> report = plan_recipe(load_recipe(None, ['global_train_batch_size=64']), world_size=4, epochs=1)
    >>> report.ok, report.epochs[0].missing
    (True, 0)
"""

from __future__ import annotations

from composer_sampling._graph.snapshot import take_snapshot
from composer_sampling._proofs.plan import PlanReport, plan_loaders
from composer_sampling.recipes.build_data import Placement, build_data, build_train_loader
from composer_sampling.recipes.build_training import check_resumed_order, check_sharding, prepare
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.schema import Recipe

__all__ = ['plan_recipe']


def plan_recipe(recipe: Recipe, world_size: int, epochs: int, proof: str = 'auto',
                workers: int | None = None) -> PlanReport:
    """Build every rank's loader for ``world_size`` and check ``epochs`` trainer epochs of their orders.

    ``proof`` and ``workers`` are :func:`~composer_sampling.check_plan`'s. Raises a
    :class:`~composer_sampling.recipes.errors.RecipeError` for what ``train`` refuses before it builds any part.
    """
    prepared = prepare(resolve(recipe), world_size, copy_checkpoints=False)
    spec, checked = prepared.spec, prepared.checked
    if prepared.complete is not None:
        print(f'note: {spec.load_path_field}: {prepared.complete}; train would say the run is complete and train '
              'nothing', flush=True)
    batch_sizes = checked.batch_sizes
    seed = checked.checkpoint_seed if checked.checkpoint_seed is not None else spec.sync.data_seed
    data = build_data(spec, batch_sizes)
    # One loader per data-parallel rank; with replication R, ranks r and r' of one group share loader r // R.
    loaders = [build_train_loader(spec, data.train, batch_sizes, Placement(batch_sizes.data_parallel, rank, seed))
               for rank in range(batch_sizes.data_parallel)]
    graph = take_snapshot(loaders[0])
    check_sharding(spec, graph, world_size, 0, batch_sizes.replication)
    check_resumed_order(checked, graph)
    rank_loaders = [loaders[rank // batch_sizes.replication] for rank in range(world_size)]
    return plan_loaders(batch_sizes, seed, rank_loaders, epochs, proof=proof, workers=workers)
