"""The recipe runner: YAML recipes resolved, checked, built and trained, and the ``composer-sampling`` command.

Nothing here is imported by ``import composer_sampling``. A recipe goes down these floors once:

* ``errors.py``, ``durations.py``: :class:`RecipeError`, and time strings read as Composer reads them;
* ``schema.py``: the recipe's fields, loaded from YAML and overrides;
* ``registry.py``: the named parts, what each needs (options and their ranges), the one import of code;
* ``resolve.py``: the recipe resolved once into a frozen ``RunSpec``;
* ``folders.py``, ``checkpoints.py``, ``checks.py``: every refusal ``plan`` and ``train`` share, before training;
* ``build_data.py``: datasets, splits (and their checks) and DataLoaders;
* ``build_composer_parts.py``: the model and its optimizer, and every part the ``Trainer`` takes;
* ``build_training.py``: the run for this process, then its ``Trainer``, and every rank's loader for ``plan``;
* ``runner.py`` (``train``), ``cli.py`` (the command's ``train``, ``plan`` and ``recipes``; the
  command itself is ``composer_sampling._cli``'s, and runs ``audit`` and ``docs`` without Composer).
"""

from composer_sampling._requires import require

require('composer_sampling.recipes (the recipe runner: composer-sampling train, plan and recipes)',
        ['composer', 'omegaconf', 'tabulate'], 'composer')
