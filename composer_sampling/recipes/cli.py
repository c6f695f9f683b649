"""The recipe runner's subcommands of ``composer-sampling``: ``train``, ``plan`` and ``recipes``, and :func:`main`.

The parser, ``audit`` and ``docs`` are :mod:`composer_sampling._cli.command`'s, which
need no Composer; the console script is ``composer_sampling.__main__:main``, which
imports this module only for the subcommands here. :func:`main` is the whole command
too, under the import path of earlier releases (their console script named it).

Exit status: 0 when every guarantee holds, 1 when one fails (the message names
it), 2 for bad input (a recipe field, a missing folder, a damaged ledger).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tabulate import tabulate

from composer_sampling._cli.command import Command, list_or_choose, run, shipped
from composer_sampling._proofs.progress import showing_progress
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.runner import main as train_main
from composer_sampling.recipes.schema import load_recipe

if TYPE_CHECKING:  # each command imports what it needs when it runs: --help and a bad recipe stay quick
    from composer_sampling._proofs.plan import PlanReport

__all__ = ['COMMANDS', 'main']


def _description(path: Path) -> str:
    """The first sentence of a recipe's header, the ``#`` lines at its top, up to an indented one (a command)."""
    header = itertools.takewhile(lambda line: line.startswith('#') and not line.startswith('#   '),
                                 path.read_text().splitlines())
    text = ' '.join(word for word in (line.lstrip('#').strip() for line in header) if word)
    return re.split(r'(?<=[.!?])\s+', text, maxsplit=1)[0]


def _recipes(args: argparse.Namespace) -> int:
    recipe = list_or_choose(shipped('recipes/yamls', '.yaml'), args.name, '.yaml', 'packaged recipe',
                            _description, 'copy one out with: composer-sampling recipes NAME [--to DIR]')
    if recipe is None:
        return 0
    target = _copy_target(Path(args.to), recipe.name, args.force)
    # The header's commands name the copy, not the bundled file.
    text = recipe.read_text().replace(f'yamls/{recipe.name}', str(target))
    try:
        target.write_text(text)
    except OSError as error:
        raise RecipeError(f'--to {args.to}: cannot write {target} ({error.strerror})') from None
    print(f'wrote {target}; train it with: composer-sampling train {target}')
    return 0


def _copy_target(folder: Path, name: str, force: bool) -> Path:
    """Where ``recipes NAME --to DIR`` writes: a plain file in DIR, never through a symlink nor onto a folder."""
    if not folder.is_dir():
        raise RecipeError(f'--to {folder}: not a folder')
    target = folder / name
    if target.is_symlink():
        raise RecipeError(f'{target} is a symbolic link (to {os.readlink(target)}); composer-sampling writes only '
                          'plain files in the folder it is given: remove the link or choose another --to')
    if target.is_dir():
        raise RecipeError(f'{target} is a folder; --force replaces a file only: choose another --to')
    if target.exists() and not force:
        raise RecipeError(f'{target} exists; pass --force to replace it')
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RecipeError(f'--to {folder}: this process may not write there')
    return target


def _print_plan(report: PlanReport, seconds: float) -> None:
    from composer_sampling._proofs.summary import render_rows, summary_rows

    sizes = report.batch_sizes
    print('\n'.join(render_rows(summary_rows(sizes, report.accounting, str(report.data_seed), report.sub_epochs,
                                             fingerprint=report.fingerprint or None))))
    if report.sources:
        print('\n' + tabulate(report.sources, headers='keys', tablefmt='github'))
    print('\nsampler graph of rank 0:\n' + report.tree)
    if report.epochs:
        table = [(e.epoch, e.trained, e.exactly_once, e.repeated, e.missing, e.overlap,
                  ('FAILED' if e.problem else 'ok') if e.complete else 'partial pass') for e in report.epochs]
        headers = ['epoch' if report.sub_epochs == 1 else 'data epoch', 'trained', 'exactly once', 'repeated',
                   'missing', 'on several ranks', 'check']
        print('\n' + tabulate(table, headers=headers, tablefmt='github'))
    groups = '' if sizes.replication == 1 else f' ({sizes.data_parallel} data-parallel groups of {sizes.replication})'
    passes = f'{len(report.epochs)} pass{"es" * (len(report.epochs) != 1)}'
    ranks = f'{sizes.world_size} rank{"s" * (sizes.world_size != 1)}'
    if report.proof:
        print(f'\nproof: {report.proof}')
    print(f'\nchecked {passes} on {ranks}{groups} in {seconds:.1f} s')


def _epochs_checked(epochs: int, max_duration: str) -> str:
    """How many trainer epochs plan checked, against how many the recipe trains, and how to check more."""
    from composer_sampling.recipes.durations import parse_duration

    checked = f'checked {epochs} trainer epoch{"s" * (epochs != 1)} (--epochs {epochs})'
    value, unit = parse_duration(max_duration)
    if unit == 'ep' and value > epochs:
        return (f'{checked} of the {value} that the recipe trains (max_duration: {max_duration}); '
                f'--epochs {value} checks them all')
    if unit == 'ep':
        return f'{checked}, every epoch that the recipe trains (max_duration: {max_duration})'
    return f'{checked}; the recipe trains for max_duration: {max_duration}; --epochs N checks N epochs'


def _plan(args: argparse.Namespace) -> int:
    if args.world_size < 1 or args.epochs < 1:
        raise RecipeError(f'--world-size and --epochs must be at least 1, got {args.world_size} and {args.epochs}')
    if args.workers is not None and args.workers < 1:
        raise RecipeError(f'--workers must be at least 1, got {args.workers}')
    recipe = load_recipe(args.recipe, args.overrides)  # before Composer is imported: a refusal here stays quick
    from composer_sampling._proofs.plan import ConstructionError
    from composer_sampling.recipes.build_training import plan_recipe

    started = time.perf_counter()
    try:
        with showing_progress('plan', sys.stderr):  # the counted proof's ranks, on a terminal only
            report = plan_recipe(recipe, args.world_size, args.epochs, args.proof, args.workers)
    except ConstructionError as error:
        raise RecipeError(str(error)) from None
    _print_plan(report, time.perf_counter() - started)
    print(_epochs_checked(args.epochs, recipe.max_duration))
    for problem in report.problems:
        print(f'FAILED guarantee: {problem}', file=sys.stderr)
    if report.ok:
        print(report.verdict)
    return 0 if report.ok else 1


def _train(args: argparse.Namespace) -> int:
    return train_main([args.recipe, *args.overrides])


def _refusing(command: Command) -> Command:
    """``command``, which exits with status 2 on a :class:`RecipeError`, printing it as one line."""
    @functools.wraps(command)
    def run_command(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except RecipeError as error:
            print(f'error: {error}', file=sys.stderr)
            return 2
    return run_command


#: The subcommands that need the ``composer`` extra, by name (``train`` prints its own refusals).
COMMANDS: dict[str, Command] = {'train': _train, 'plan': _refusing(_plan), 'recipes': _refusing(_recipes)}


def main(argv: list[str] | None = None) -> int:
    """The ``composer-sampling`` command, every subcommand included (as ``composer_sampling.__main__.main``), under
    the import path that earlier releases' console script named."""
    return run(argv, lambda: COMMANDS)


if __name__ == '__main__':
    sys.exit(main())
