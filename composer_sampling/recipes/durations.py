"""Durations and intervals of a recipe, read as Composer reads its time strings, without importing Composer.

Example:
    >>> parse_duration('3ep'), parse_duration('1e3BA'), parse_duration('0.5dur')
    ((3, 'ep'), (1000, 'ba'), (0.5, 'dur'))
    >>> valid_duration('max_duration', '0ep')
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.errors.RecipeError: max_duration='0ep' must be positive (0 would train nothing); ...
    >>> valid_duration('max_duration', '99999999999999999999999999ep')
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.errors.RecipeError: max_duration='99999999999999999999999999ep' is out of range: ...
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from composer_sampling.recipes.errors import RecipeError

__all__ = ['DURATION_UNITS', 'MAX_WHOLE_DURATION', 'SCHEDULE_UNITS', 'exact_amount', 'parse_duration',
           'valid_duration']

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
#: The largest whole amount of a duration that Composer reads exactly: ``Time.from_timestring`` parses the number as
#: a 64-bit float, which holds every whole number up to 2**53 and only some beyond it.
MAX_WHOLE_DURATION = 2**53
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


def exact_amount(text: str) -> Fraction:
    """The number of the time string ``text`` exactly as written, in integer arithmetic (no float on the way);
    ``ValueError`` if it is not a finite number followed by a unit.

    Example:
        >>> exact_amount('99999999999999999999999999ep'), exact_amount('1e3ba'), exact_amount('0.5dur')
        (Fraction(99999999999999999999999999, 1), Fraction(1000, 1), Fraction(1, 2))
    """
    parse_duration(text)  # a number Composer reads, and a finite one: no exponent too large to hold below
    match = _DURATION.match(text)
    assert match is not None, 'parse_duration matched it'
    return Fraction(match.group(1))


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
    if unit == 'dur':
        return value, unit
    exact, valid = exact_amount(text), f'use a whole number from 1 to 2**53 ({MAX_WHOLE_DURATION}) followed by {unit}'
    if exact.denominator != 1:
        raise RecipeError(f'{name}={text!r}: the unit {unit} needs a whole number, and Composer would read this one as '
                          f'{value}; {valid}')
    if exact != value or value > MAX_WHOLE_DURATION:
        turned = f'turns it into {value}' if exact != value else 'holds every whole number exactly only up to 2**53'
        raise RecipeError(f'{name}={text!r} is out of range: Composer reads the number as a 64-bit float, which '
                          f'{turned}; {valid}')
    return value, unit
