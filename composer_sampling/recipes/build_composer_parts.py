"""Every part the ``Trainer`` takes that a recipe builds, in one call: callbacks, LR schedulers, loggers, algorithms,
the model and its optimizer, and the Trainer's console settings.

Each part is Composer's class, or a builder of yours by ``target``, built with the recipe's arguments.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> spec = resolve(load_recipe(None, ['scheduler={name: linear_with_warmup, t_warmup: 2ba}',
    ...                                   'algorithms.gradient_clipping={clipping_type: norm, clipping_threshold: 1}']))
    >>> parts = build_trainer_parts(spec)
    >>> [type(part).__name__ for part in (*parts.callbacks, *parts.schedulers, *parts.algorithms, parts.optimizer)]
    ['SamplerSync', 'LinearWithWarmupScheduler', 'GradientClipping', 'AdamW']
    >>> for row in summary_rows(spec, device='cpu'):
    ...     print(*row, sep=': ')
    device: cpu (device: auto)
    precision: fp32 (Composer's default on cpu)
    LR schedule: linear_with_warmup (t_warmup=2ba)
    algorithms: gradient_clipping (clipping_type=norm, clipping_threshold=1)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from composer_sampling.recipes.builders import built
from composer_sampling.recipes.checkpoints import CheckedCheckpoint, checkpoint_argument_of
from composer_sampling.recipes.composer_names import refused_algorithm
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import PartSpec, RunSpec
from composer_sampling.recipes.schema import Recipe

if TYPE_CHECKING:
    import torch
    from composer.core import Algorithm, Callback
    from composer.loggers import LoggerDestination
    from composer.models import ComposerModel

__all__ = ['TrainerParts', 'build_trainer_parts', 'console_arguments', 'show_progress_bar', 'summary_rows']


@dataclass(frozen=True)
class TrainerParts:
    """The built parts of a run's ``Trainer``, schedulers in the order Composer receives them."""

    callbacks: list[Callback]
    schedulers: list[Any]
    loggers: list[LoggerDestination]
    algorithms: list[Algorithm]
    model: ComposerModel
    optimizer: torch.optim.Optimizer
    console: dict[str, Any]


def build_trainer_parts(spec: RunSpec, checkpoints: Mapping[str, CheckedCheckpoint] | None = None) -> TrainerParts:
    """Build every part of ``spec`` the Trainer takes; a wrong type or a refused part names its field.

    A callback that unpickles a checkpoint receives the checked copy from ``checkpoints`` (by field).
    """
    import torch
    from composer.core import Algorithm, Callback
    from composer.loggers import LoggerDestination
    from torch.optim.lr_scheduler import LRScheduler

    from composer_sampling.recipes.models import build_model, build_optimizer

    console = console_arguments(spec.recipe)
    checkpoints = checkpoints or {}
    handed = {part.field: {name.rpartition('.')[2]: checked.load_path for name, checked in checkpoints.items()
                           if name.rpartition('.')[0] == part.field} for part in spec.callbacks}
    callbacks = [built(replace(part, arguments={**part.arguments, **handed[part.field]}) if handed[part.field] else
                       part, lambda made: isinstance(made, Callback), 'a composer.core.Callback',
                       {'folder': spec.ledger_folder} if part.entry is not None and part.entry.ledger_folder and
                       part.arguments.get('folder') is None else {})
                 for part in spec.callbacks]
    schedulers = [built(part, lambda made: callable(made) or isinstance(made, LRScheduler),
                        'a Composer scheduler (a callable of the state) or a torch LRScheduler')
                  for part in spec.schedulers]
    loggers = [built(part, lambda made: isinstance(made, LoggerDestination), 'a composer.loggers.LoggerDestination')
               for part in spec.loggers]
    algorithms = [built(part, lambda made: isinstance(made, Algorithm), 'a composer.core.Algorithm')
                  for part in spec.algorithms]
    for part, algorithm in zip(spec.algorithms, algorithms, strict=True):  # a builder's, as a name is refused
        refused = refused_algorithm(algorithm)
        if refused is not None:
            name, cls, reason = refused
            raise RecipeError(f"{part.field}: the builder returned Composer's {cls} ({name}), which a recipe "
                              f'refuses: {reason}')
    for part, callback in zip(spec.callbacks, callbacks, strict=True):
        if not handed[part.field] and checkpoint_argument_of(type(callback)) is not None:
            raise RecipeError(f'{part.field}: the builder returned a {type(callback).__name__}, which unpickles a '
                              'checkpoint the check never saw; name it by its class (name: load_checkpoint, or '
                              'target: composer.callbacks:LoadCheckpoint) with its load_path, so that the file is '
                              'checked')
    torch.manual_seed(spec.recipe.seed)  # the model's initial weights follow the recipe's seed
    model = build_model(spec, checkpoints.get('load_path'))
    optimizer = build_optimizer(spec, model)
    return TrainerParts(callbacks, schedulers, loggers, algorithms, model, optimizer, console)


def show_progress_bar(recipe: Recipe) -> bool:
    """``progress_bar`` as the recipe sets it; when null, on where stdout and stderr are both terminals.

    Example:
        >>> show_progress_bar(Recipe(progress_bar=True)), show_progress_bar(Recipe(progress_bar=False))
        (True, False)
    """
    if recipe.progress_bar is not None:
        return recipe.progress_bar
    return all(stream is not None and stream.isatty() for stream in (sys.stdout, sys.stderr))


def console_arguments(recipe: Recipe) -> dict[str, Any]:
    """The Trainer's console arguments: the progress bar (:func:`show_progress_bar`), console logging, its interval.

    Example:
        >>> console_arguments(Recipe(progress_bar=False, log_to_console=True))
        {'progress_bar': False, 'log_to_console': True, 'console_log_interval': '1ep'}
    """
    return {'progress_bar': show_progress_bar(recipe), 'log_to_console': bool(recipe.log_to_console),
            'console_log_interval': recipe.console_log_interval}


def _described(part: PartSpec) -> str:
    arguments = ', '.join(f'{key}={value}' for key, value in part.arguments.items())
    return f'{part.label} ({arguments})' if arguments else part.label


def summary_rows(spec: RunSpec, device: str = 'cpu',
                 checkpoints: Mapping[str, CheckedCheckpoint] | None = None) -> list[tuple[str, Any]]:
    """The summary's rows about the training around the data: device, precision, parallelism, autoresume, and the
    LR schedule, algorithms and loggers when the recipe sets them."""
    recipe = spec.recipe
    shown = device if recipe.device == device else f'{device} (device: {recipe.device})'
    default = 'amp_fp16' if device == 'gpu' else 'fp32'
    rows: list[tuple[str, Any]] = [
        ('device', shown),
        ('precision', recipe.precision or f"{default} (Composer's default on {device})"),
    ]
    if recipe.parallelism_config:
        rows.append(('parallelism', ', '.join(recipe.parallelism_config)))
    if recipe.autoresume:
        checked = (checkpoints or {}).get('load_path')
        resumed = checked.path if checked is not None else recipe.load_path
        if resumed is not None and os.path.islink(resumed):
            resumed = f'{resumed} ({os.readlink(resumed)})'
        rows.append(('autoresume', f'resumes from {resumed}' if resumed is not None else
                     'no checkpoint in save_folder yet: starts fresh'))
    if spec.schedulers:
        ratio = recipe.scale_schedule_ratio
        scaled = f', scale_schedule_ratio {ratio:g}' if ratio != 1 else ''
        rows.append(('LR schedule', ' x '.join(_described(part) for part in spec.schedulers) + scaled))
    if spec.algorithms:
        rows.append(('algorithms', ', '.join(_described(part) for part in spec.algorithms)))
    if spec.loggers:
        rows.append(('loggers', ', '.join(part.label for part in spec.loggers)))
    return rows
