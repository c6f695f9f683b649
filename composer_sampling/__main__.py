"""The ``composer-sampling`` command's entry point, also run as ``python -m composer_sampling``.

``audit``, ``docs`` and ``--help`` work in the base install; ``train``, ``plan`` and
``recipes`` need the ``composer`` extra, and this module imports the recipe runner
only for them (:func:`composer_sampling._cli.command.run`).

Example:
    $ composer-sampling audit checkpoints/my-run
    $ python -m composer_sampling docs resume
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from composer_sampling._cli.command import Command, run

__all__ = ['main']


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand that ``argv`` (default: ``sys.argv[1:]``) names, and return its exit status."""
    return run(argv, _recipe_commands)


def _recipe_commands() -> Mapping[str, Command]:
    """The recipe runner's subcommands, imported once one of them is asked for (and the composer extra is there)."""
    from composer_sampling.recipes.cli import COMMANDS

    return COMMANDS


if __name__ == '__main__':
    sys.exit(main())
