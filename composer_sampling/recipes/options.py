"""An inline option of a registered part: its kind, default and range, the one rule it keeps inline or in kwargs.

Example:
    >>> Option('duration', minimum=0, exclusive=True).check('scheduler.t_max', '0ba')
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.options.OptionError: scheduler.t_max must be a Composer time: a whole number > 0 ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from composer_sampling._validate import is_real
from composer_sampling.recipes.durations import SCHEDULE_UNITS, parse_duration

__all__ = ['Option', 'OptionError']


class OptionError(ValueError):
    """A value that breaks its option's rule; the message names where it was given and the rule."""


_KINDS: dict[str, tuple[type, ...]] = {'int': (int,), 'float': (int, float), 'bool': (bool,), 'str': (str,),
                                       'key': (str, int), 'fractions': (list, tuple), 'duration': (str,),
                                       'durations': (list, tuple)}


def _time_in_range(text: str, minimum: float, exclusive: bool) -> bool:
    """Whether ``text`` is a time a schedule counts (:data:`SCHEDULE_UNITS`), at least (or above) ``minimum``."""
    try:
        value, unit = parse_duration(text)
    except ValueError:
        return False
    return unit in SCHEDULE_UNITS and math.isfinite(value) and (value > minimum if exclusive else value >= minimum)


@dataclass(frozen=True)
class Option:
    """An inline option of a registered part: its kind, default, range, and whether a recipe must give it.

    Example:
        >>> Option('float', default=0.003, minimum=0, exclusive=True).check('lr', 0)
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.options.OptionError: lr must be a number in (0, inf), got 0
    """

    kind: str
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive: bool = False  # the minimum itself is out of range
    required: bool = False

    def rule(self) -> str:
        """The option's rule in words: ``an int in [1, inf)``."""
        if self.kind == 'bool':
            return 'true or false'
        if self.kind == 'str':
            return 'a string'
        if self.kind == 'key':
            return 'a mapping key (a string) or a position in a tuple batch (an int)'
        if self.kind == 'fractions':
            return 'a list of positive fractions summing to 1'
        if self.kind in ('duration', 'durations'):
            at_least = f'{">" if self.exclusive else "≥"} {self.minimum or 0:g}'
            whole = f'{", ".join(SCHEDULE_UNITS[:-2])} or {SCHEDULE_UNITS[-2]}'
            time = (f'a Composer time: a whole number {at_least} followed by {whole}, or a '
                    f'number {at_least} followed by dur (a fraction of max_duration), e.g. 100ba or 0.1dur')
            return time if self.kind == 'duration' else f'a list of times, each {time}'
        low = '(-inf' if self.minimum is None else ('(' if self.exclusive else '[') + f'{self.minimum:g}'
        high = 'inf)' if self.maximum is None else f'{self.maximum:g}]'
        return f'{"an int" if self.kind == "int" else "a number"} in {low}, {high}'

    def check(self, where: str, value: Any) -> Any:
        """``value`` if it keeps this option's rule; :class:`OptionError` naming ``where`` and the rule if not."""
        if value is None and not self.required:
            return value
        if self.kind == 'durations' and isinstance(value, (list, tuple)):
            for k, item in enumerate(value):
                Option('duration', minimum=self.minimum, exclusive=self.exclusive).check(f'{where}[{k}]', item)
            return list(value)
        kinds = _KINDS[self.kind]
        wrong = (not isinstance(value, kinds) or (self.kind in ('int', 'float', 'key') and isinstance(value, bool))
                 or (self.kind == 'float' and not math.isfinite(cast(float, value))))
        if self.kind in ('int', 'float') and not wrong:
            wrong = ((self.minimum is not None and (value <= self.minimum if self.exclusive else value < self.minimum))
                     or (self.maximum is not None and value > self.maximum))
        if self.kind == 'fractions' and not wrong:
            wrong = (not value or any(not is_real(f) or not f > 0 for f in value) or abs(sum(value) - 1) > 1e-6)
        if self.kind == 'duration' and not wrong:
            wrong = not _time_in_range(value, self.minimum or 0, self.exclusive)
        if wrong:
            raise OptionError(f'{where} must be {self.rule()}, got {value!r}')
        return value
