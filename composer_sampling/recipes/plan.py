"""``composer-sampling plan``: dry-run a recipe at any world size and check the guarantees.

The recipe is validated as ``train`` validates it, every rank's train loader is
built (datasets are built, never indexed) and :func:`composer_sampling.plan.check_loaders`
computes and counts their orders.

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> report = plan_recipe(load_recipe(None, ['global_train_batch_size=64']), world_size=4, epochs=1)
    >>> report.ok, report.epochs[0].missing
    (True, 0)
"""

from __future__ import annotations

from composer_sampling.plan import PlanReport, check_loaders
from composer_sampling.recipes.build import Placement, build_train_loader, check_run
from composer_sampling.recipes.schema import Recipe

__all__ = ['plan_recipe']


def plan_recipe(recipe: Recipe, world_size: int, epochs: int) -> PlanReport:
    """Build every rank's loader for ``world_size`` and check ``epochs`` trainer epochs of their orders.

    Raises :class:`~composer_sampling.recipes.schema.RecipeError` for everything
    ``train`` refuses at this world size (:func:`~composer_sampling.recipes.build.check_run`,
    the one validation of both) except the builders of the model, the optimizer and
    the callbacks, which plan neither builds nor imports; and for a sampler option that cannot run.
    """
    checked = check_run(recipe, world_size, training=False)
    plan, data_seed, dataset = checked.plan, checked.data_seed, checked.train_dataset
    # One loader per data-parallel rank; with replication R, ranks r and r' of one group share loader r // R.
    loaders = [build_train_loader(recipe, dataset, plan, Placement(plan.data_parallel, rank, data_seed))
               for rank in range(plan.data_parallel)]
    return check_loaders(plan, data_seed, [loaders[rank // plan.replication] for rank in range(world_size)], epochs)
