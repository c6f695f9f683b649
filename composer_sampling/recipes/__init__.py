"""The recipe runner: YAML recipes validated, built and trained, and the ``composer-sampling`` command.

Nothing here is imported by ``import composer_sampling``: the library (callbacks,
samplers, plan and audit) stays light, and the runner loads Composer only when a
recipe is trained.

* ``schema.py``: the recipe's fields and their validation (no Composer import);
* ``registry.py``: the named parts a recipe can build, from ours and from entry points;
* ``build.py``: datasets, loaders, model, optimizer, callbacks and the Trainer;
* ``plan.py``: ``composer-sampling plan``;
* ``train.py``: ``composer-sampling train`` and ``python -m composer_sampling.train``;
* ``cli.py``: the ``composer-sampling`` command;
* ``demo/``: the bundled digits and synthetic data, the MLP, a custom batch sampler;
* ``yamls/``: the example recipes (``composer-sampling recipes`` lists and copies them).
"""
