"""Composer's own parts of a resolved recipe: LR schedulers, loggers and algorithms, and the Trainer's console settings.

Each part is Composer's class (or a builder of yours, by ``target``) built with the
recipe's arguments; nothing here schedules, logs or changes training itself. An
algorithm a recipe refuses by name (``REFUSED_ALGORITHMS``) is refused here too when a
builder returns one, before anything trains.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> spec = resolve(load_recipe(None, ['scheduler={name: linear_with_warmup, t_warmup: 2ba}',
    ...                                   'algorithms.gradient_clipping={clipping_type: norm, clipping_threshold: 1}']))
    >>> parts = build_composer_parts(spec)
    >>> [type(part).__name__ for part in (*parts.schedulers, *parts.algorithms)]
    ['LinearWithWarmupScheduler', 'GradientClipping']
    >>> for row in summary_rows(spec):
    ...     print(*row, sep=': ')
    LR schedule: linear_with_warmup (t_warmup=2ba)
    algorithms: gradient_clipping (clipping_type=norm, clipping_threshold=1)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from composer_sampling.recipes.builders import run_builder
from composer_sampling.recipes.composer_names import ALGORITHMS, REFUSED_ALGORITHMS
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import PartSpec, RunSpec
from composer_sampling.recipes.schema import Recipe

if TYPE_CHECKING:
    from composer.core import Algorithm
    from composer.loggers import LoggerDestination

__all__ = ['ComposerParts', 'build_composer_parts', 'built', 'console_arguments', 'show_progress_bar', 'summary_rows']


@dataclass(frozen=True)
class ComposerParts:
    """The built schedulers (in the order Composer receives them), loggers and algorithms of a run."""

    schedulers: list[Any] = field(default_factory=list)
    loggers: list[LoggerDestination] = field(default_factory=list)
    algorithms: list[Algorithm] = field(default_factory=list)


def build_composer_parts(spec: RunSpec) -> ComposerParts:
    """Build every scheduler, logger and algorithm of ``spec``; a wrong type or a refused algorithm names its field."""
    from composer.core import Algorithm
    from composer.loggers import LoggerDestination
    from torch.optim.lr_scheduler import LRScheduler

    schedulers = [built(part, lambda made: callable(made) or isinstance(made, LRScheduler),
                         'a Composer scheduler (a callable of the state) or a torch LRScheduler')
                  for part in spec.schedulers]
    loggers = [built(part, lambda made: isinstance(made, LoggerDestination), 'a composer.loggers.LoggerDestination')
               for part in spec.loggers]
    algorithms = [built(part, lambda made: isinstance(made, Algorithm), 'a composer.core.Algorithm')
                  for part in spec.algorithms]
    for part, algorithm in zip(spec.algorithms, algorithms, strict=True):
        _refuse_by_class(part, algorithm)
    return ComposerParts(schedulers, loggers, algorithms)


def built(part: PartSpec, fits: Callable[[Any], bool] | None = None, wanted: str = '',
          extra: Mapping[str, Any] | None = None) -> Any:
    """What ``part``'s builder returns (given ``extra`` too), refused naming ``wanted`` unless it ``fits``.

    The one call of a builder for the parts of training (these, the callbacks, the model and the optimizer).
    """
    made = run_builder(part, extra)
    if fits is not None and not fits(made):
        raise RecipeError(f'{part.field}: the builder returned a {type(made).__name__}, not {wanted}')
    return made


def _refuse_by_class(part: PartSpec, algorithm: Any) -> None:
    """A builder (a ``target``) that returns an algorithm a recipe refuses by name is refused alike."""
    import composer.algorithms

    for name, reason in REFUSED_ALGORITHMS.items():
        refused = getattr(composer.algorithms, ALGORITHMS[name])
        if isinstance(algorithm, refused):
            raise RecipeError(f"{part.field}: the builder returned Composer's {refused.__name__} ({name}), which a "
                              f'recipe refuses: {reason}')


def show_progress_bar(recipe: Recipe) -> bool:
    """``progress_bar`` as the recipe sets it; when null, on where stdout and stderr are both terminals.

    Composer's ``ProgressBarLogger`` draws only on each node's local rank 0 and writes
    to stderr; a run under a pipe, a file, pytest's capture or CI stays quiet.

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


def summary_rows(spec: RunSpec) -> list[tuple[str, str]]:
    """The rows the run summary adds for the LR schedule, the algorithms and the loggers a recipe sets (none: none)."""
    rows = []
    if spec.schedulers:
        ratio = spec.recipe.scale_schedule_ratio
        scaled = f', scale_schedule_ratio {ratio:g}' if ratio != 1 else ''
        rows.append(('LR schedule', ' x '.join(_described(part) for part in spec.schedulers) + scaled))
    if spec.algorithms:
        rows.append(('algorithms', ', '.join(_described(part) for part in spec.algorithms)))
    if spec.loggers:
        rows.append(('loggers', ', '.join(part.label for part in spec.loggers)))
    return rows
