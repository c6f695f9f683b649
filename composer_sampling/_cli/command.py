"""The parser of every ``composer-sampling`` subcommand, and :func:`run`, which runs the one given.

``audit`` and ``docs`` run here, without Composer, omegaconf or tabulate. ``train``,
``plan`` and ``recipes`` belong to the recipe runner and need the ``composer`` extra:
without it they exit with status 2 and an error that names the extra, with no
traceback; with it, :func:`run` asks its caller for them. ``--help`` works for every
subcommand in either install.

Exit status: 0 when every guarantee holds, 1 when one fails (the message names
it), 2 for bad input (a recipe field, a missing folder, a damaged ledger, a missing
extra).

Example:
    >>> args = build_parser().parse_args(['audit', 'checkpoints/my-run', '--lineage', '3f2a'])
    >>> args.command, args.folder, args.lineage
    ('audit', 'checkpoints/my-run', '3f2a')
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from composer_sampling._cli._audit import audit_command
from composer_sampling._requires import require
from composer_sampling.ledger_format import LedgerError

__all__ = ['COMPOSER_EXTRA', 'DESCRIPTION', 'RECIPE_COMMANDS', 'TRAIN_EPILOG', 'TRAIN_HELP', 'Command',
           'CommandError', 'build_parser', 'list_or_choose', 'parse_recipe_arguments', 'recipe_arguments', 'run',
           'shipped']

#: What ``--help`` says the command does.
DESCRIPTION = ("The ``composer-sampling`` command: ``train`` a recipe, ``plan`` it at any world size, ``audit`` a "
               "run's ledgers.")
#: What ``--help`` says besides the arguments, in both commands that train.
TRAIN_HELP = 'Train a recipe in this process (one rank of the launcher, or alone).'
TRAIN_EPILOG = 'several ranks: composer -n N -m composer_sampling.train RECIPE.yaml [field=value ...]'
#: The subcommands of the recipe runner, which need the ``composer`` extra.
RECIPE_COMMANDS = ('train', 'plan', 'recipes')
#: The modules of the ``composer`` extra that the recipe runner imports.
COMPOSER_EXTRA = ('composer', 'omegaconf', 'tabulate')

#: A subcommand: it takes the parsed arguments and returns the exit status.
Command = Callable[[argparse.Namespace], int]


class CommandError(ValueError):
    """Bad input to a subcommand (a page or a recipe that does not exist, a folder that cannot be written): the
    message says what would be valid, and the command exits with status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``composer-sampling`` and of every subcommand; it imports nothing of the recipe runner."""
    parser = argparse.ArgumentParser(prog='composer-sampling', description=DESCRIPTION)
    parser.add_argument('--verbose', action='store_true', help='show the traceback of a part of yours that failed')
    commands = parser.add_subparsers(dest='command', required=True)
    train = commands.add_parser('train', help='train a recipe in this process (several ranks: composer -n N -m '
                                              'composer_sampling.train RECIPE)', description=TRAIN_HELP,
                                epilog=TRAIN_EPILOG)
    recipe_arguments(train, argparse.SUPPRESS)
    plan = commands.add_parser('plan', help='dry-run a recipe: batch math, sampler graph, guarantees per epoch')
    recipe_arguments(plan, argparse.SUPPRESS)
    plan.add_argument('--world-size', type=int, default=1, help='number of ranks to plan for (default: 1)')
    plan.add_argument('--epochs', type=int, default=2, help='trainer epochs to check (default: 2)')
    plan.add_argument('--proof', choices=('auto', 'construction', 'counted'), default='auto',
                      help='auto (default): by construction where every rank\'s order is ours, else counted')
    plan.add_argument('--workers', type=int, default=None,
                      help='processes that count the ranks\' orders for the counted proof (default: one per '
                           'available core, fewer for a small plan)')
    audit = commands.add_parser('audit', help="account for a run's coverage from its sample ledgers")
    audit.add_argument('folder', help='the save folder (or its ledger/ folder) of a run with sample_ledger; a URI '
                       "(s3://bucket/run) is read through Composer's object store")
    audit.add_argument('--lineage', metavar='ID', help='count this lineage (an id or its prefix) instead of the '
                                                        "final checkpoint's")
    audit.add_argument('--plot', metavar='PNG', help='also draw coverage by rank and epoch (needs matplotlib)')
    recipes = commands.add_parser('recipes', help='list the example recipes shipped with the package, or copy one')
    recipes.add_argument('name', nargs='?', help='a recipe to copy, e.g. digits (or digits.yaml)')
    recipes.add_argument('--to', default='.', metavar='DIR', help='where to copy it (default: the current folder)')
    recipes.add_argument('--force', action='store_true', help='replace a file of the same name')
    docs = commands.add_parser('docs', help='list the reference pages installed with the package, or print one')
    docs.add_argument('page', nargs='?', help='a page to print, e.g. resume (or resume.md)')
    return parser


def recipe_arguments(parser: argparse.ArgumentParser, verbose_default: Any = False) -> argparse.ArgumentParser:
    """Add what ``train`` and ``plan`` take alike: the recipe, its ``field=value`` overrides and ``--verbose``.

    ``verbose_default=argparse.SUPPRESS`` leaves a ``--verbose`` given before the command in force.

    Example:
        >>> parser = recipe_arguments(argparse.ArgumentParser())
        >>> vars(parse_recipe_arguments(parser, ['digits.yaml', 'seed=3', '--verbose', 'max_duration=1ep']))
        {'recipe': 'digits.yaml', 'overrides': ['seed=3', 'max_duration=1ep'], 'verbose': True}
    """
    parser.add_argument('recipe', help='a YAML recipe, e.g. yamls/digits.yaml')
    parser.add_argument('overrides', nargs='*', default=None, help='field=value overrides')
    parser.add_argument('--verbose', action='store_true', default=verbose_default,
                        help='show the traceback of a part of yours that failed')
    return parser


def parse_recipe_arguments(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``, taking overrides both before and after the options (argparse takes one run of them)."""
    args, extra = parser.parse_known_args(argv)
    unknown = [item for item in extra if item.startswith('-') or not hasattr(args, 'overrides')]
    if unknown:
        parser.error(f'unrecognized arguments: {" ".join(unknown)}')
    if hasattr(args, 'overrides'):
        args.overrides = [*(args.overrides or ()), *extra]
    return args


def run(argv: list[str] | None, recipe_commands: Callable[[], Mapping[str, Command]]) -> int:
    """Run the subcommand that ``argv`` (default: ``sys.argv[1:]``) names, and return its exit status.

    ``recipe_commands`` returns the recipe runner's subcommands by name; it is called
    only for one of :data:`RECIPE_COMMANDS`, once the modules of the ``composer`` extra
    are known to be installed. Without them, such a subcommand prints an error that
    names the extra and returns 2.
    """
    args = parse_recipe_arguments(build_parser(), argv)
    if args.verbose:
        os.environ['COMPOSER_SAMPLING_VERBOSE'] = '1'
    try:
        if args.command in RECIPE_COMMANDS:
            try:
                require(f'composer-sampling {args.command}', list(COMPOSER_EXTRA), 'composer')
            except ImportError as error:  # only the extra's absence: an import that fails inside it shows its traceback
                raise CommandError(str(error)) from None
            command = recipe_commands()[args.command]
        else:
            command = {'audit': audit_command, 'docs': _docs}[args.command]
        return command(args)
    except (CommandError, LedgerError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 2


def shipped(folder: str, suffix: str) -> dict[str, Path]:
    """The files ending in ``suffix`` that the package ships in ``folder``, by name without the suffix.

    Example:
        >>> 'resume' in shipped('docs', '.md')
        True
    """
    root = Path(__file__).resolve().parent.parent
    return {path.stem: path for path in sorted((root / folder).glob(f'*{suffix}'))}


def list_or_choose(files: dict[str, Path], given: str | None, suffix: str, what: str,
                   describe: Callable[[Path], str], hint: str) -> Path | None:
    """Print ``files`` with their descriptions and ``hint`` when nothing is ``given``, else return the file it names.

    Raises :class:`CommandError` naming the choices when ``given`` names none of ``files``.
    """
    if given is None:
        for name, path in files.items():
            lines = textwrap.wrap(describe(path), width=77) or ['']  # 100 columns, the name in 22 of them
            for k, line in enumerate(lines):
                print(f'{name if k == 0 else "":<22} {line}')
        print(f'\n{hint}')
        return None
    name = given.removesuffix(suffix)
    if name not in files:
        raise CommandError(f'no {what} {given!r}; choose one of: {", ".join(files)}')
    return files[name]


def _docs(args: argparse.Namespace) -> int:
    """List the reference pages that the wheel installs beside the code, or print one of them."""
    page = list_or_choose(shipped('docs', '.md'), args.page, '.md', 'page',
                          lambda path: path.read_text().splitlines()[0].lstrip('# '),
                          'print one with: composer-sampling docs PAGE')
    if page is not None:
        print(page.read_text(), end='')
    return 0
