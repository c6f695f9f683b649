"""The ``composer-sampling`` command: its arguments, its dispatch, and the subcommands that need no Composer.

``audit`` and ``docs`` run here, after ``pip install composer-sampling`` alone (the
install of a Lightning user); ``train``, ``plan`` and ``recipes`` are the recipe
runner's (``composer_sampling.recipes.cli``) and need the ``composer`` extra. The
entry point, ``composer_sampling.__main__``, joins the two.

What other folders may import, a module a line; the modules whose names start with
an underscore are this folder's own:

* ``command``: the parser of every subcommand, :func:`~composer_sampling._cli.command.run`
  (the dispatch), and what the recipe runner's commands share with it: the recipe
  arguments and the files the package ships
* ``_audit``, ``_table``: ``audit``'s report as printed (and its plot), and the tables
  it prints, without tabulate
"""
