"""The ``composer-sampling`` command: ``train`` a recipe, ``plan`` it at any world size, ``audit`` a run's ledgers.

Exit status: 0 when every guarantee holds, 1 when one fails (the message names
it), 2 for bad input (a recipe field, a missing folder, a damaged ledger).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tabulate import tabulate

from composer_sampling.ledger_format import LedgerError
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.runner import TRAIN_EPILOG, TRAIN_HELP, parse_recipe_arguments, recipe_arguments
from composer_sampling.recipes.schema import load_recipe

if TYPE_CHECKING:  # each command imports what it needs when it runs: --help and a bad recipe stay quick
    from composer_sampling._proofs.plan import PlanReport
    from composer_sampling.audit import AuditReport

__all__ = ['main']


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='composer-sampling', description=__doc__.split('\n\n')[0])
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


def _description(path: Path) -> str:
    """The first sentence of a recipe's header, the ``#`` lines at its top, up to an indented one (a command)."""
    header = itertools.takewhile(lambda line: line.startswith('#') and not line.startswith('#   '),
                                 path.read_text().splitlines())
    text = ' '.join(word for word in (line.lstrip('#').strip() for line in header) if word)
    return re.split(r'(?<=[.!?])\s+', text, maxsplit=1)[0]


def _shipped(folder: str, suffix: str) -> dict[str, Path]:
    """The files ending in ``suffix`` that the package ships in ``folder``, by name without the suffix."""
    root = Path(__file__).resolve().parent.parent
    return {path.stem: path for path in sorted((root / folder).glob(f'*{suffix}'))}


def _list_or_choose(files: dict[str, Path], given: str | None, suffix: str, what: str,
                    describe: Callable[[Path], str], hint: str) -> Path | None:
    """Print ``files`` with their descriptions and ``hint`` when nothing is ``given``, else the file it names."""
    if given is None:
        for name, path in files.items():
            lines = textwrap.wrap(describe(path), width=77) or ['']  # 100 columns, the name in 22 of them
            for k, line in enumerate(lines):
                print(f'{name if k == 0 else "":<22} {line}')
        print(f'\n{hint}')
        return None
    name = given.removesuffix(suffix)
    if name not in files:
        raise RecipeError(f'no {what} {given!r}; choose one of: {", ".join(files)}')
    return files[name]


def _recipes(args: argparse.Namespace) -> int:
    recipe = _list_or_choose(_shipped('recipes/yamls', '.yaml'), args.name, '.yaml', 'packaged recipe',
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


def _docs(args: argparse.Namespace) -> int:
    """List the reference pages that the wheel installs beside the code, or print one of them."""
    page = _list_or_choose(_shipped('docs', '.md'), args.page, '.md', 'page',
                           lambda path: path.read_text().splitlines()[0].lstrip('# '),
                           'print one with: composer-sampling docs PAGE')
    if page is not None:
        print(page.read_text(), end='')
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


def _print_audit(report: AuditReport) -> None:
    print(tabulate(report.attempts, headers='keys', tablefmt='github'))
    print(f'\nlineage counted: {report.lineage_id} ({report.chosen})')
    print(f'attempts counted, from the fresh start: {" -> ".join(report.lineage)}')
    print(f'data fingerprint: {report.data_fingerprint or "none recorded (ledgers written before it existed)"}')
    for other in report.other_lineages:
        print(f'other lineage {other["lineage"]} (run {other["run_name"]}, {other["attempts"]} attempt'
              f'{"s" * (other["attempts"] != 1)}, to batch {other["last_batch"]}, {other["samples"]} samples of a '
              f'dataset of {other["dataset_len"]}): not counted; audit it with --lineage {other["lineage"]}')
    if report.tie:
        print(f'tie: {report.tie}')
    for branch in report.abandoned:
        print(f'abandoned branch {branch["attempt"]}: {branch["origin"]}, trained {branch["trained"]} '
              f'({branch["samples"]} samples); not counted, the final model does not descend from it')
    if report.superseded:
        print(f'{report.superseded} samples trained after the checkpoint a resume started from were superseded '
              '(lost with a crash or left behind by the resume, which trained those batches again)')
    for skipped in report.skipped:
        print(f'skipped: {skipped}')
    for torn in report.torn:
        print(f'torn record: {torn}; the records before it are counted')
    table = [(e.epoch, e.trained, e.exactly_once, e.repeated, e.missing, e.status) for e in report.epochs]
    print('\n' + tabulate(table, headers=['epoch', 'trained', 'exactly once', 'repeated', 'missing', 'status'],
                          tablefmt='github'))
    print(f'\ndataset length {report.dataset_len}')


def _plot(report: AuditReport, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        raise RecipeError('--plot needs matplotlib: pip install "composer-sampling[plot]"') from None
    rows = sorted({(attempt, rank) for attempt, rank, _ in report.per_rank})
    epochs = [e.epoch for e in report.epochs]
    grid = [[report.per_rank.get((attempt, rank, epoch), 0) for epoch in epochs] for attempt, rank in rows]
    figure, axis = plt.subplots(figsize=(1.5 + 0.9 * len(epochs), 1.2 + 0.45 * len(rows)))
    image = axis.imshow(grid, aspect='auto', cmap='viridis')
    axis.set_xticks(range(len(epochs)), [f'{e.epoch}\n{e.status.split(" ")[0]}' for e in report.epochs])
    axis.set_yticks(range(len(rows)), [f'attempt {attempt} rank {rank}' for attempt, rank in rows])
    axis.set_xlabel('epoch')
    axis.set_title('samples trained per rank and epoch')
    for y, row in enumerate(grid):
        for x, value in enumerate(row):
            axis.text(x, y, str(value), ha='center', va='center', color='white', fontsize=8)
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def _audit(args: argparse.Namespace) -> int:
    from composer_sampling.audit import audit_folder

    report = audit_folder(args.folder, args.lineage)  # a str: a URI's '//' must reach the check
    _print_audit(report)
    if args.plot:
        _plot(report, args.plot)
        print(f'coverage plot written to {args.plot}')
    for epoch in report.violations:
        print(f'FAILED guarantee: exactly once per epoch: epoch {epoch.epoch} repeats {epoch.repeated} and misses '
              f'{epoch.missing} samples', file=sys.stderr)
    return 1 if report.violations else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``composer-sampling`` console script."""
    parser = _parser()
    args = parse_recipe_arguments(parser, argv)
    if args.verbose:
        os.environ['COMPOSER_SAMPLING_VERBOSE'] = '1'
    if args.command == 'train':
        from composer_sampling.recipes.runner import main as train_main

        return train_main([args.recipe, *args.overrides])
    try:
        commands = {'plan': _plan, 'audit': _audit, 'recipes': _recipes, 'docs': _docs}
        return commands[args.command](args)
    except (RecipeError, LedgerError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
