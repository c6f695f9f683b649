"""A part's builder: imported, then called with its arguments; a failure names the part's field, and ``--verbose``
shows the builder's own traceback.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> spec = resolve(load_recipe(None, ['train_loader.dataset={name: synthetic, size: 10}']))
    >>> len(run_builder(spec.parts['train_loader.dataset']))
    10
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.registry import ImportTargetError, NotAllowedError, RegistryError, import_target
from composer_sampling.recipes.resolve import PartSpec

__all__ = ['RUNNER_KEYWORDS', 'VERBOSE_VARIABLE', 'bound_builder', 'builder_of', 'built', 'run_builder']

#: Set it, or pass ``--verbose``, to see the traceback of a user's builder that failed.
VERBOSE_VARIABLE = 'COMPOSER_SAMPLING_VERBOSE'
#: The keywords the runner passes to a part's builder besides the part's own arguments.
RUNNER_KEYWORDS = {'train_loader.sampler': ('dataset', 'num_replicas', 'rank', 'seed', 'device_batch_size'),
                   'optimizer': ('params',)}


def builder_of(part: PartSpec) -> Callable[..., Any]:
    """Import a part's builder; a failing import names the part and chains the user's own error."""
    try:
        return import_target(part.target, f'{part.field}.target', trusted=part.trusted)
    except ImportTargetError as error:
        raise RecipeError(_with_traceback(f'{part.field}: {error}', error.__cause__)) from error.__cause__
    except NotAllowedError as error:
        raise RecipeError(str(error)) from None
    except RegistryError as error:
        raise RecipeError(f'{part.field}: {error}') from None


def run_builder(part: PartSpec, extra: Mapping[str, Any] | None = None) -> Any:
    """Call a part's builder with its arguments (and the runner's ``extra``); a failure names the part."""
    function = builder_of(part)
    try:
        return function(**part.arguments, **(extra or {}))
    except Exception as error:
        ours = part.entry is not None and not part.entry.from_entry_point and isinstance(error, ValueError)
        message = f'{part.field}: {error}' if ours else f'{part.field}: {part.label} raised {type(error).__name__}: ' \
                                                        f'{error}'
        raise RecipeError(_with_traceback(message, None if ours else error)) from error


def built(part: PartSpec, fits: Callable[[Any], bool] | None = None, wanted: str = '',
          extra: Mapping[str, Any] | None = None) -> Any:
    """What ``part``'s builder returns (given ``extra`` too), refused naming ``wanted`` unless it ``fits``.

    Example:
        >>> from composer_sampling.recipes.resolve import resolve
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> built(resolve(load_recipe(None)).parts['model'], lambda made: False, 'a ComposerModel')
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.errors.RecipeError: model: the builder returned a MLPClassifier, not a ComposerModel
    """
    made = run_builder(part, extra)
    if fits is not None and not fits(made):
        raise RecipeError(f'{part.field}: the builder returned a {type(made).__name__}, not {wanted}')
    return made


def bound_builder(part: PartSpec) -> Callable[..., Any]:
    """A part's builder with its arguments bound, to be called later (a collate function with the samples)."""
    function = builder_of(part)
    return functools.partial(function, **part.arguments) if part.arguments else function


def _with_traceback(message: str, error: BaseException | None) -> str:
    if error is None or os.environ.get(VERBOSE_VARIABLE, '') in ('', '0'):
        return message
    return message + '\n' + ''.join(traceback.format_exception(error)).rstrip()
