"""The optional dependencies a part of the package needs, named in the error when they are missing.

``pip install composer-sampling`` installs the order core: the samplers,
``distribute``, the graph walk, ``plan``'s proofs, the ledger format and ``audit``
(``composer-sampling audit`` and ``docs`` too), on torch alone. Composer's callbacks,
the recipe runner and the command's ``train``, ``plan`` and ``recipes`` need the
``composer`` extra; the Lightning callback needs Lightning.

Example:
    >>> require('the example', ['json'], 'composer')  # present: nothing happens
"""

from __future__ import annotations

import importlib.util

__all__ = ['require']


def require(what: str, modules: list[str], extra: str, elsewhere: str = '') -> None:
    """Raise an :class:`ImportError` naming ``extra`` unless every one of ``modules`` can be imported; ``elsewhere``
    says where a user of another trainer finds the same thing.

    Example:
        >>> require('SamplerSync', ['no_such_module'], 'composer')
        Traceback (most recent call last):
        ...
        ImportError: SamplerSync needs no_such_module (not installed): pip install 'composer-sampling[composer]'
    """
    missing = [name for name in modules if not _installed(name)]
    if missing:
        raise ImportError(f"{what} needs {', '.join(missing)} (not installed): "
                          f"pip install 'composer-sampling[{extra}]'{f'. {elsewhere}' if elsewhere else ''}")


def _installed(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it (a module set to ``None`` in ``sys.modules`` cannot)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ValueError, ImportError):
        return False
