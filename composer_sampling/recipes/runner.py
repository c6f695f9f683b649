"""Train a recipe: resolve, check, build, print the summary on rank 0, train, report the held-out metrics.

Composer is imported only once the recipe has loaded, so that a recipe its schema refuses exits 2 quickly.

Example:
    $ composer-sampling train yamls/digits.yaml max_duration=1ep
    $ composer -n 2 -m composer_sampling.train yamls/digits-grad-accum.yaml
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from composer_sampling._checkpoint.save_folder import set_aside_interrupted
from composer_sampling._cli.command import TRAIN_EPILOG, TRAIN_HELP, parse_recipe_arguments, recipe_arguments
from composer_sampling.recipes.errors import RecipeError, RunComplete
from composer_sampling.recipes.schema import Recipe, load_recipe

if TYPE_CHECKING:
    from composer import Trainer

    from composer_sampling.recipes.build_training import Run

__all__ = ['NO_SAMPLER_SYNC', 'TrainResult', 'main', 'parse_recipe_arguments', 'recipe_arguments',
           'set_aside_interrupted', 'train']

NO_SAMPLER_SYNC = (
    'training without callbacks.sampler_sync: a sampler Composer does not reach (any but a DistributedSampler set '
    "on the DataLoader) keeps epoch 0's order, a mid-epoch resume replays the trained batches instead of starting "
    'at its position, and nothing checks that the ranks share one seed and split the data; add '
    'callbacks.sampler_sync={} unless this is what you want'
)


@dataclass
class TrainResult:
    run: Run
    trainer: Trainer
    eval_metrics: dict[str, float]

    @property
    def eval_accuracy(self) -> float:
        """The held-out ``MulticlassAccuracy`` (the demo model's metric)."""
        return self.eval_metrics['MulticlassAccuracy']


def train(recipe: Recipe, run: Run | None = None, **trainer_overrides: Any) -> TrainResult:
    """Train ``recipe`` in this process (one rank of the launcher, or alone); ``SamplerSync``'s refusals at fit start
    are raised as a :class:`RecipeError`. ``run`` replaces what :func:`build_run` would build; ``trainer_overrides``
    go to ``Trainer``."""
    from composer.utils import dist

    from composer_sampling.callbacks.sampler_sync import DataOrderError, SamplerSync, SecondCallbackError
    from composer_sampling.recipes.build_composer_parts import build_trainer_parts, held_out_metrics
    from composer_sampling.recipes.build_training import build_run, build_trainer
    from composer_sampling.recipes.resolve import resolve

    if run is None:
        run = build_run(resolve(recipe))
    if run.complete is not None:
        raise RunComplete(f'{run.spec.load_path_field}: {run.complete}; the run is complete, nothing to train. Raise '
                          'max_duration to train further')
    parts = build_trainer_parts(run.spec, run.checked_checkpoints)  # a part that fails to build fails here
    rank_zero = dist.get_global_rank() == 0  # the only rank that writes a single-file checkpoint, and that prints
    if rank_zero and not run.spec.sync.present and not any(
            isinstance(callback, SamplerSync) for callback in trainer_overrides.get('callbacks', [])):
        warnings.warn(NO_SAMPLER_SYNC, UserWarning, stacklevel=2)
    if rank_zero:
        set_aside_interrupted(run.interrupted)  # once every check has passed: a refusal moves nothing
        print(run.summary, flush=True)
    try:
        trainer = build_trainer(run, parts, **trainer_overrides)  # loads the checkpoint: SamplerSync reads its state
        trainer.fit()
    except (DataOrderError, SecondCallbackError) as error:
        raise RecipeError(str(error)) from error
    metrics = held_out_metrics(trainer)
    if rank_zero:
        report = ', '.join(f'{name} {value:.4f}' for name, value in metrics.items()) or 'no metrics'
        print(f'held-out after {trainer.state.timestamp.epoch.value} epochs: {report}', flush=True)
    trainer.close()
    return TrainResult(run=run, trainer=trainer, eval_metrics=metrics)


def main(argv: list[str] | None = None) -> int:
    """Command line entry: exit 0 after training or when the run is complete, 2 for a bad recipe."""
    parser = argparse.ArgumentParser(prog='python -m composer_sampling.train', description=TRAIN_HELP,
                                     epilog=TRAIN_EPILOG)
    args = parse_recipe_arguments(recipe_arguments(parser), argv)
    if args.verbose:
        os.environ['COMPOSER_SAMPLING_VERBOSE'] = '1'
    # Composer warns whenever a last, partial batch is smaller than the microbatch: expected here.
    warnings.filterwarnings('ignore', message='Cannot split tensor of length')
    rank_zero = int(os.environ.get('LOCAL_RANK', '0')) == 0  # as composer.utils.dist reads it, without Composer
    try:
        train(load_recipe(args.recipe, args.overrides))
    except RunComplete as complete:
        if rank_zero:
            print(complete, flush=True)
        return 0
    except RecipeError as error:
        if rank_zero:
            print(f'error: {error}', file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == '__main__':  # python -m composer_sampling.recipes.runner
    sys.exit(main())
