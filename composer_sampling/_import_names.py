"""Names of the form ``'package.module:attribute'``: the one pattern and the one importer.

Recipes name their parts this way (``target:``), and checkpoint allow-lists name
the types a pickle may hold (``checkpoint_safe_globals``, ``check_checkpoint``).

Example:
    >>> split_import_name('collections:OrderedDict')
    ('collections', 'OrderedDict')
    >>> split_import_name('collections.OrderedDict') is None
    True
    >>> import_name('collections', 'OrderedDict.fromkeys').__name__
    'fromkeys'
"""

from __future__ import annotations

import importlib
import re
from typing import Any

__all__ = ['IMPORT_NAME_FORM', 'MissingAttributeError', 'import_name', 'split_import_name']

#: ``module:attribute``, both parts dotted Python identifiers.
IMPORT_NAME_FORM = re.compile(r'^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$')


class MissingAttributeError(AttributeError):
    """The module imported, but it has no such (dotted) attribute."""


def split_import_name(spec: object) -> tuple[str, str] | None:
    """``(module, attribute)`` of a well-formed ``'module:attribute'`` string, else None."""
    if not isinstance(spec, str) or not IMPORT_NAME_FORM.match(spec):
        return None
    module_name, _, attribute = spec.partition(':')
    return module_name, attribute


def import_name(module_name: str, attribute: str) -> Any:
    """Import ``module_name`` and follow the dotted ``attribute`` inside it.

    Whatever the module raises while importing propagates unchanged; a missing
    attribute raises :class:`MissingAttributeError`.
    """
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split('.'):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise MissingAttributeError(f'{module_name} has no attribute {attribute}') from None
    return obj
