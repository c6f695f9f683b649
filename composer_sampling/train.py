"""Train a recipe: ``python -m composer_sampling.train RECIPE [field=value ...]``.

The recipe runner lives in :mod:`composer_sampling.recipes.runner`; this module
keeps the short name that launch commands use, on one rank or several::

    composer -n 2 -m composer_sampling.train yamls/mixture.yaml
"""

from __future__ import annotations

from composer_sampling.recipes.runner import main, train

__all__ = ['main', 'train']

if __name__ == '__main__':
    raise SystemExit(main())
