"""Names of the form ``'package.module:attribute'``: the one pattern and the one importer.

Recipes name their parts this way (``target:``), and checkpoint allow-lists name
the types a pickle may hold (``checkpoint_safe_globals``, ``check_checkpoint``).
Given the allowed packages, :func:`import_name` keeps the whole walk inside them:
the module before the colon, every object the dotted attribute reaches on the way
and the object it ends on (by their ``__module__``), and no step may be a module.

Example:
    >>> split_import_name('collections:OrderedDict')
    ('collections', 'OrderedDict')
    >>> split_import_name('collections.OrderedDict') is None
    True
    >>> import_name('collections', 'OrderedDict.fromkeys').__name__
    'fromkeys'
    >>> import_name('os', 'path.join', allowed=['os'])
    Traceback (most recent call last):
    ...
    composer_sampling._checkpoint.import_names.OutsideAllowedError: os:path is the module posixpath; ...
"""

from __future__ import annotations

import importlib
import re
import types
from collections.abc import Sequence
from typing import Any

__all__ = ['IMPORT_NAME_FORM', 'MissingAttributeError', 'OutsideAllowedError', 'import_name', 'in_packages',
           'split_import_name']

#: ``module:attribute``, both parts dotted Python identifiers.
IMPORT_NAME_FORM = re.compile(r'^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$')


class MissingAttributeError(AttributeError):
    """The module imported, but it has no such (dotted) attribute."""


class OutsideAllowedError(ValueError):
    """A step of a dotted attribute that reaches a module, or an object of a module outside the allowed packages."""


def split_import_name(spec: object) -> tuple[str, str] | None:
    """``(module, attribute)`` of a well-formed ``'module:attribute'`` string, else None."""
    if not isinstance(spec, str) or not IMPORT_NAME_FORM.match(spec):
        return None
    module_name, _, attribute = spec.partition(':')
    return module_name, attribute


def in_packages(module_name: str, packages: Sequence[str]) -> bool:
    """Whether ``module_name`` is one of ``packages`` or inside one (``my_pkg.data`` is in ``my_pkg``, not ``my_pkgx``).

    Example:
        >>> in_packages('torch.optim.adamw', ['torch.optim']), in_packages('torch.optimx', ['torch.optim'])
        (True, False)
    """
    return any(module_name == name or module_name.startswith(f'{name}.') for name in packages)


def import_name(module_name: str, attribute: str, allowed: Sequence[str] | None = None) -> Any:
    """Import ``module_name`` and follow the dotted ``attribute`` inside it, one step at a time.

    Whatever the module raises while importing propagates unchanged; a missing
    attribute raises :class:`MissingAttributeError`. With ``allowed`` (package
    names; the caller has checked ``module_name`` against them before importing it),
    every object reached must carry a ``__module__`` inside them and none may be a
    module, or :class:`OutsideAllowedError` is raised before anything reached is used.
    """
    obj: Any = importlib.import_module(module_name)
    steps = attribute.split('.')
    for k, part in enumerate(steps):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise MissingAttributeError(f'{module_name} has no attribute {attribute}') from None
        if allowed is not None:
            _check_step(obj, f'{module_name}:{".".join(steps[:k + 1])}', allowed)
    return obj


def _check_step(obj: Any, name: str, allowed: Sequence[str]) -> None:
    """``obj``, reached as ``name``, is no module and belongs to a module inside ``allowed``."""
    if isinstance(obj, types.ModuleType):
        raise OutsideAllowedError(f'{name} is the module {obj.__name__}; a dotted attribute may not pass through a '
                                  f'module: name it before the colon ({obj.__name__}:...)')
    owner = getattr(obj, '__module__', None)
    if not isinstance(owner, str):
        raise OutsideAllowedError(f'{name} is a {type(obj).__name__} that names no module of its own, so it cannot '
                                  'be told to be inside the allowed packages')
    if not in_packages(owner, allowed):
        raise OutsideAllowedError(f'{name} is {getattr(obj, "__qualname__", type(obj).__name__)} of the module '
                                  f'{owner!r}, outside the allowed packages')
