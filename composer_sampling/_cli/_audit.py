"""``composer-sampling audit FOLDER``: the report of :func:`~composer_sampling.audit.audit_folder` as printed.

Nothing here needs Composer, omegaconf or tabulate: ``audit`` runs in the base install.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from composer_sampling._cli._table import github_table, keyed_table
from composer_sampling._proofs.progress import showing_progress

if TYPE_CHECKING:  # the audit's own imports (numpy) wait until the command runs: --help stays quick
    from composer_sampling.audit import AuditReport

__all__ = ['audit_command', 'print_audit']


class PlotError(ValueError):
    """``--plot`` without matplotlib: the message says what to install."""


def audit_command(args: argparse.Namespace) -> int:
    """Audit ``args.folder`` (and draw ``args.plot``): exit 0 when every epoch holds, 1 when one is violated."""
    from composer_sampling.audit import audit_folder

    with showing_progress('audit', sys.stderr):
        report = audit_folder(args.folder, args.lineage)  # a str: a URI's '//' must reach the check
    print_audit(report)
    if args.plot:
        try:
            _plot(report, args.plot)
        except PlotError as error:
            print(f'error: {error}', file=sys.stderr)
            return 2
        print(f'coverage plot written to {args.plot}')
    for epoch in report.violations:
        print(f'FAILED guarantee: exactly once per epoch: epoch {epoch.epoch} repeats {epoch.repeated} and misses '
              f'{epoch.missing} samples', file=sys.stderr)
    return 1 if report.violations else 0


def print_audit(report: AuditReport) -> None:
    """Print the attempts, the lineage counted and why, what was not counted, and the coverage of every epoch."""
    print(keyed_table(report.attempts))
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
    print('\n' + github_table(table, ['epoch', 'trained', 'exactly once', 'repeated', 'missing', 'status']))
    print(f'\ndataset length {report.dataset_len}')


def _plot(report: AuditReport, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError('--plot needs matplotlib: pip install "composer-sampling[plot]"') from None
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
