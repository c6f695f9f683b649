"""Run a recipe: build everything, print the summary on rank 0, train, report the held-out metrics.

Composer (and torch) are imported only once the recipe has loaded: a recipe that
fails its static checks exits 2 in a fraction of the time an import of Composer takes.

Example:
    $ python scripts/train.py yamls/digits.yaml max_duration=1ep
    $ composer -n 2 scripts/train.py yamls/digits-grad-accum.yaml
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from composer_sampling.recipes.schema import Recipe, RecipeError, load_recipe

if TYPE_CHECKING:
    from composer import Trainer

    from composer_sampling.recipes.build import Run

__all__ = ['TrainResult', 'main', 'train']

NO_SAMPLER_SYNC = (
    'training without callbacks.sampler_sync: a sampler Composer does not reach (any but a DistributedSampler set '
    "on the DataLoader) keeps epoch 0's order, a mid-epoch resume replays the trained batches instead of starting "
    'at its position, and nothing checks that the ranks share one seed and split the data; add '
    'callbacks.sampler_sync={} unless this is what you want'
)
USAGE = 'usage: python scripts/train.py RECIPE.yaml [field=value ...]   (or: composer -n N scripts/train.py ...)'


@dataclass
class TrainResult:
    run: Run
    trainer: Trainer
    eval_metrics: dict[str, float]

    @property
    def eval_accuracy(self) -> float:
        """The held-out ``MulticlassAccuracy`` (the demo model's metric)."""
        return self.eval_metrics['MulticlassAccuracy']


def _print_rank_zero(text: str) -> None:
    from composer.utils import dist

    if dist.get_global_rank() == 0:
        print(text, flush=True)


def train(recipe: Recipe, run: Run | None = None, **trainer_overrides: Any) -> TrainResult:
    """Train ``recipe`` in this process (one rank of the launcher, or alone).

    ``run`` replaces what :func:`build_run` would build (tests swap in instrumented
    parts); ``trainer_overrides`` go to ``Trainer``.
    """
    from composer.utils import dist, get_device

    from composer_sampling.callbacks.sampler_sync import SamplerSync
    from composer_sampling.recipes.build import build_run, build_trainer
    from composer_sampling.summary import render_summary

    if run is None:
        if dist.get_world_size() > 1:  # as the Trainer does: one process needs no group
            # The builders run inside the process group, so a dataset builder may use composer.utils.dist.
            dist.initialize_dist(get_device(None), recipe.dist_timeout)
        run = build_run(recipe)
    if dist.get_global_rank() == 0 and not any(isinstance(callback, SamplerSync) for callback in
                                               [*run.callbacks, *trainer_overrides.get('callbacks', [])]):
        warnings.warn(NO_SAMPLER_SYNC, UserWarning, stacklevel=2)
    seed_source = 'callbacks.sampler_sync.data_seed' if run.data_seed != recipe.seed else 'the trainer seed'
    _print_rank_zero(render_summary(run.plan, run.train_loader, run.data_seed, seed_source))
    trainer = build_trainer(run, **trainer_overrides)
    trainer.fit()
    metrics = held_out_metrics(trainer)
    report = ', '.join(f'{name} {value:.4f}' for name, value in metrics.items()) or 'no metrics'
    _print_rank_zero(f'held-out after {trainer.state.timestamp.epoch.value} epochs: {report}')
    trainer.close()
    return TrainResult(run=run, trainer=trainer, eval_metrics=metrics)


def held_out_metrics(trainer: Trainer) -> dict[str, float]:
    """Every scalar eval metric the model defines, computed over the held-out loader (empty before an eval)."""
    values = {}
    for name, metric in trainer.state.eval_metrics.get('eval', {}).items():
        value = metric.compute()
        if getattr(value, 'numel', lambda: 1)() == 1:
            values[name] = float(value)
    return values


def main(argv: list[str] | None = None) -> int:
    """Command line entry: exit 0 after training, 2 for a bad recipe (before any training)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ('-h', '--help'):
        print(USAGE)
        return 0 if args else 2
    # Composer warns whenever a last, partial batch is smaller than the microbatch: expected here.
    warnings.filterwarnings('ignore', message='Cannot split tensor of length')
    try:
        recipe = load_recipe(args[0], args[1:])
        train(recipe)
    except RecipeError as error:
        if int(os.environ.get('LOCAL_RANK', '0')) == 0:  # as composer.utils.dist reads it, without importing Composer
            print(f'error: {error}', file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == '__main__':  # python -m composer_sampling.train, or composer -n N -m composer_sampling.train
    sys.exit(main())
