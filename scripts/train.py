"""Train a recipe: ``python scripts/train.py RECIPE [field=value ...]`` or ``composer -n N scripts/train.py RECIPE``."""

import sys

from composer_sampling.train import main

if __name__ == '__main__':
    sys.exit(main())
