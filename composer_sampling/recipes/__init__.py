"""The recipe runner: YAML recipes resolved, checked, built and trained, and the ``composer-sampling`` command.

Nothing here is imported by ``import composer_sampling``: the library (callbacks,
samplers, plan and audit) stays light, and the runner loads Composer only when a
recipe is trained. A recipe goes down these floors once, each importing only the
floors above it:

* ``errors.py``, ``durations.py``: :class:`RecipeError`, and time strings read as Composer reads them;
* ``schema.py``: the recipe's fields, loaded from YAML and overrides;
* ``registry.py``: the named parts, what each needs (options and their ranges), the one import of code;
* ``resolve.py``: the recipe resolved once into a frozen ``RunSpec``;
* ``checks.py``: every refusal ``plan`` and ``train`` share, before training;
* ``build_data.py``: datasets, splits and DataLoaders;
* ``build_training.py``: callbacks, model, optimizer, the ``Trainer``;
* ``dry_run.py`` (``composer-sampling plan``), ``runner.py`` (``train``), ``cli.py`` (the command).

``builtin_parts.py`` holds the builders of the sampler names that are torch's or the
demo's (each sampler of ours names itself with its module's ``RECIPE``),
``demo/`` the bundled data and model, ``yamls/`` the example recipes.
"""
