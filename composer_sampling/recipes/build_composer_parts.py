"""Every part of the ``Trainer`` that a recipe builds, in one call: callbacks, LR schedulers, loggers, algorithms,
the model and its optimizer, and the console settings.

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

import torch
from composer.core import Algorithm, Callback
from composer.loggers import LoggerDestination
from composer.models import ComposerClassifier, ComposerModel

from composer_sampling._validate import is_integer
from composer_sampling.recipes.builders import built
from composer_sampling.recipes.checkpoints import CheckedCheckpoint, checkpoint_argument_of
from composer_sampling.recipes.composer_names import refused_algorithm
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import PartSpec, RunSpec
from composer_sampling.recipes.schema import Recipe

if TYPE_CHECKING:
    from composer import Trainer

__all__ = ['IndexedClassifier', 'TrainerParts', 'build_model', 'build_optimizer', 'build_trainer_parts',
           'held_out_metrics', 'show_progress_bar', 'summary_rows']


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
    from torch.optim.lr_scheduler import LRScheduler

    recipe, checkpoints = spec.recipe, checkpoints or {}
    console = {'progress_bar': show_progress_bar(recipe), 'log_to_console': bool(recipe.log_to_console),
               'console_log_interval': recipe.console_log_interval}
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
    torch.manual_seed(recipe.seed)  # the model's initial weights follow the recipe's seed
    model = build_model(spec, checkpoints.get('load_path'))
    return TrainerParts(callbacks, schedulers, loggers, algorithms, model, build_optimizer(spec, model), console)


class IndexedClassifier(ComposerClassifier):
    """The ``ComposerClassifier`` a plain model with ``num_classes`` is wrapped in: it also takes batches
    ``(inputs, targets, indices)``, so that ``SampleLedger(index_key=2)`` can read the indices.

    Example:
        >>> model = IndexedClassifier(torch.nn.Linear(4, 3), num_classes=3)
        >>> model((torch.zeros(2, 4), torch.tensor([0, 1]), torch.tensor([7, 8]))).shape
        torch.Size([2, 3])
    """

    def forward(self, batch: Any) -> torch.Tensor:
        return self.module(batch[0])

    def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self._loss_fn(outputs, batch[1], *args, **kwargs)

    def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
        metric.update(outputs, batch[1])


def build_model(spec: RunSpec, checked: CheckedCheckpoint | None = None) -> ComposerModel:
    """The model the recipe names, as a ``ComposerModel``, checked against the shapes of ``checked``."""
    part = spec.parts['model']
    made, label = built(part), part.label
    if isinstance(made, torch.nn.Module) and not isinstance(made, ComposerModel):
        classes = getattr(made, 'num_classes', None)
        if not is_integer(classes) or classes < 1:
            raise RecipeError(f'model: {label} returned a plain {type(made).__name__} without an integer '
                              'num_classes attribute; set module.num_classes (it is wrapped in a ComposerClassifier, '
                              'which needs it for its metrics) or return a composer.models.ComposerModel')
        made = IndexedClassifier(made, num_classes=classes)
    if not isinstance(made, ComposerModel):
        raise RecipeError(f'model: {label} returned a {type(made).__name__}; return a composer.models.ComposerModel '
                          'or a torch.nn.Module with a num_classes attribute')
    if checked is not None and checked.model_shapes:  # none: trusted unchecked, or a checkpoint without a model
        _check_model_shapes(checked, made, label)
    return made


def _check_model_shapes(checked: CheckedCheckpoint, model: torch.nn.Module, label: str) -> None:
    """The checkpoint at ``load_path`` holds the model's tensors, each of the model's shape."""
    own = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    for name, shape in checked.model_shapes.items():
        if name in own and own[name] != shape:
            raise RecipeError(f'{checked.field}: the checkpoint {checked.path} holds {name} of shape {list(shape)}, '
                              f'the model ({label}) has {name} of shape {list(own[name])}: it was written by a model '
                              'of another shape; load one of this model, or set the model options it was trained with')
    extra, missing = sorted(set(checked.model_shapes) - set(own)), sorted(set(own) - set(checked.model_shapes))
    if extra or missing:
        detail = f'holds {extra[0]}, which the model lacks' if extra else f'lacks the model\'s {missing[0]}'
        raise RecipeError(f'{checked.field}: the checkpoint {checked.path} {detail} (model: {label}): it was written '
                          'by another model; load one of this model, or build the model it was trained with')


def build_optimizer(spec: RunSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer builder gets ``params`` (the model's parameters) and its own arguments."""
    return built(spec.parts['optimizer'], lambda made: isinstance(made, torch.optim.Optimizer),
                 'a torch.optim.Optimizer', {'params': model.parameters()})


def held_out_metrics(trainer: Trainer) -> dict[str, float]:
    """Every scalar eval metric the model defines, computed over the held-out loader (empty before an eval)."""
    values = {}
    for name, metric in trainer.state.eval_metrics.get('eval', {}).items():
        value = metric.compute()
        if getattr(value, 'numel', lambda: 1)() == 1:
            values[name] = float(value)
    return values


def show_progress_bar(recipe: Recipe) -> bool:
    """``progress_bar`` as the recipe sets it; when null, on where stdout and stderr are both terminals.

    Example:
        >>> show_progress_bar(Recipe(progress_bar=True)), show_progress_bar(Recipe(progress_bar=False))
        (True, False)
    """
    if recipe.progress_bar is not None:
        return recipe.progress_bar
    return all(stream is not None and stream.isatty() for stream in (sys.stdout, sys.stderr))


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
