"""The Lightning packages installed: ``lightning.pytorch``, ``pytorch_lightning``, or both.

Each package has its own ``Callback`` class, and a Trainer takes only callbacks of
its own package's class. :data:`CALLBACK_BASES` holds every one installed, so that a
class deriving from all of them is a callback of either Trainer.

Example:
    >>> all(base.__name__ == 'Callback' for base in CALLBACK_BASES)
    True
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ['CALLBACK_BASES', 'LIGHTNING_PACKAGES']

#: The packages that provide Lightning's Trainer, in the order they are preferred.
LIGHTNING_PACKAGES = ('lightning.pytorch', 'pytorch_lightning')


def _callback_bases() -> tuple[type[Any], ...]:
    found = []
    for package in LIGHTNING_PACKAGES:
        try:
            found.append(importlib.import_module(package).Callback)
        except ImportError:
            continue
    if not found:
        raise ImportError("composer_sampling.lightning needs Lightning (lightning or pytorch-lightning, not "
                          "installed): pip install 'composer-sampling[lightning]'")
    return tuple(found)


CALLBACK_BASES: tuple[type[Any], ...] = _callback_bases()
