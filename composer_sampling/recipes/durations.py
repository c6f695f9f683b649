"""Durations and intervals of a recipe, read as Composer reads its time strings, without importing Composer.

Example:
    >>> parse_duration('3ep'), parse_duration('1e3BA'), parse_duration('0.5dur')
    ((3, 'ep'), (1000, 'ba'), (0.5, 'dur'))
    >>> valid_duration('max_duration', '0ep')
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.errors.RecipeError: max_duration='0ep' must be positive (0 would train nothing); ...
"""

from __future__ import annotations

import math
import re

from composer_sampling.recipes.errors import RecipeError

__all__ = ['DURATION_UNITS', 'SCHEDULE_UNITS', 'parse_duration', 'valid_duration']

#: The units each duration field may use: not Composer's ``iter`` and wall-clock ``sec``, which a run does not count;
#: ``dur``, a fraction of ``max_duration``, for intervals only; ``tok`` needs batches whose tokens Composer counts.
DURATION_UNITS = {
    'max_duration': ('ep', 'ba', 'sp', 'tok'),
    'eval_interval': ('ep', 'ba', 'sp', 'tok', 'dur'),
    'save_interval': ('ep', 'ba', 'sp', 'tok', 'dur'),
    'console_log_interval': ('ep', 'ba'),  # Composer's ConsoleLogger counts no other unit
}
#: The units of a time argument of a Composer scheduler (``t_warmup``, ``t_max``, ...); ``dur`` last.
SCHEDULE_UNITS = ('ep', 'ba', 'sp', 'tok', 'dur')
_COMPOSER_UNITS = ('iter', 'ep', 'ba', 'sp', 'tok', 'dur', 'sec')
_DURATION = re.compile(r'^(.+)(' + '|'.join(_COMPOSER_UNITS) + r')$', flags=re.IGNORECASE)
_NO_EFFECT = {'max_duration': 'would train nothing', 'eval_interval': 'would never evaluate',
              'save_interval': 'would never save', 'console_log_interval': 'would never log'}


def parse_duration(text: str) -> tuple[int | float, str]:
    """``(value, unit)`` of a Composer time string, read as ``Time.from_timestring`` reads it; ``ValueError`` if not.

    The unit is read case-insensitively and returned in lower case; every unit but ``dur`` needs a whole number.
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f'{text!r} is not a number followed by a unit ({", ".join(_COMPOSER_UNITS)})')
    number, unit = match.group(1), match.group(2).lower()
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f'{number!r} in {text!r} is not a number') from None
    if unit == 'dur':
        return value, unit
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f'{text!r}: the unit {unit} needs a whole number, got {number}')
    return int(value), unit


def valid_duration(name: str, text: str) -> tuple[int | float, str]:
    """The duration field ``name`` read and checked: a unit this run counts and a positive amount."""
    units = DURATION_UNITS[name]
    rule = (f'a whole number of at least 1 followed by {", ".join(unit for unit in units if unit != "dur")}'
            + (', or a fraction in (0, 1] of max_duration followed by dur' if 'dur' in units else ''))
    try:
        value, unit = parse_duration(text)
    except ValueError as error:
        examples = "'3ep', '100ba' or '5000sp'" if 'sp' in units else "'1ep' or '100ba'"
        raise RecipeError(f'{name}={text!r} is not a duration this run can count ({error}); use {rule}, '
                          f'e.g. {examples}') from None
    if unit not in units:
        why = {'iter': 'the run counts no iterations', 'sec': 'wall-clock time is not a data position',
               'dur': 'Composer allows dur for intervals only'}.get(unit, '')
        if name == 'console_log_interval':
            why = "Composer's console logger counts epochs and batches only"
        raise RecipeError(f'{name}={text!r}: the unit {unit} is not one this run can count ({why}); use {rule}')
    if unit == 'dur' and not 0 < value <= 1:
        raise RecipeError(f'{name}={text!r}: a fraction of max_duration must be in (0, 1], got {value}')
    if unit != 'dur' and value < 1:
        raise RecipeError(f'{name}={text!r} must be positive ({value} {_NO_EFFECT[name]}); use {rule}')
    return value, unit
