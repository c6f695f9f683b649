"""The progress line of ``audit`` and of ``plan``'s counted proof: drawn on a terminal, absent from a pipe.

A terminal is a real pseudo-terminal (``pty.openpty``) given to the command as its
standard error; in the tests in this process, a stream whose ``isatty`` says so.
"""

from __future__ import annotations

import importlib.util
import io
import os
import pty
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch.utils.data import BatchSampler, DataLoader

from composer_sampling import ResumableDistributedSampler
from composer_sampling._graph.snapshot import take_snapshot
from composer_sampling._proofs._workers import tally_passes
from composer_sampling._proofs.progress import Progress, current_progress, showing_progress
from composer_sampling.audit import audit_folder

from support.command_runs import RESUMED_RUN_AUDIT, ROOT, WITHOUT_COMPOSER, environment, write_resumed_run

COMPOSER = importlib.util.find_spec('composer') is not None


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _lines(drawn: str) -> list[str]:
    """The lines drawn, one after the other, each without the blanks that cover a longer one before it."""
    return [line.rstrip() for line in drawn.split('\r') if line.strip()]


def test_the_line_is_drawn_at_most_once_an_interval_and_erased() -> None:
    terminal = Terminal()
    line = Progress('audit', terminal, interval=3600)
    for done in range(1000):
        line.update(done, 1000, 'scanned {done} of {total} ledger files')
    first = 'audit: scanned 0 of 1,000 ledger files, 0 s'
    assert terminal.getvalue() == '\r' + first  # the first report at once, then none within the interval
    line.draw('a shorter line')  # covers the longer line before it
    line.erase()
    assert terminal.getvalue().split('\r')[2:] == ['audit: a shorter line'.ljust(len(first)), ' ' * 21, '']


def test_nothing_is_drawn_where_the_stream_is_no_terminal() -> None:
    piped = io.StringIO()
    with showing_progress('audit', piped, interval=0) as line:
        assert line is current_progress() and not line.active
        line.update(1, 2, 'scanned {done} of {total} ledger files')
    assert piped.getvalue() == '' and not current_progress().active
    with showing_progress('audit', Terminal()) as line:
        assert current_progress() is line and line.active
    assert not current_progress().active  # the block restored the silent line


def test_audit_reports_both_of_its_passes(tmp_path: Path) -> None:
    folder = write_resumed_run(tmp_path / 'ledger')
    terminal = Terminal()
    with showing_progress('audit', terminal, interval=0):
        report = audit_folder(folder)
    drawn = _lines(terminal.getvalue())
    assert drawn[:4] == [f'audit: scanned {k} of 4 ledger files, 0 s' for k in range(4)]
    assert drawn[-1] == 'audit: counted 24 of 24 recorded samples, 0 s'  # every record, counted or superseded
    assert terminal.getvalue().endswith('\r' + ' ' * len(drawn[-1]) + '\r')  # erased before the report is printed
    assert [epoch.status for epoch in report.epochs][:2] == ['ok', 'ok']


class SlowBatches:
    """A batch sampler of the user's that takes its time before each rank's pass: the counted proof's case."""

    def __init__(self, inner: BatchSampler) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[list[int]]:
        time.sleep(0.05)
        yield from self.inner

    def __len__(self) -> int:
        return len(self.inner)


@pytest.mark.parametrize('workers', [1, 2])
def test_the_counted_proof_reports_the_ranks_counted(workers: int) -> None:
    """In this process (one worker) after each rank; from forked workers through their shared slots."""
    ranks = 8
    loaders = [DataLoader(range(32), batch_sampler=SlowBatches(BatchSampler(ResumableDistributedSampler(
        32, ranks, rank), 2, False))) for rank in range(ranks)]
    graphs = [take_snapshot(loader) for loader in loaders]
    terminal = Terminal()
    with showing_progress('plan', terminal, interval=0.01):
        tallies = [tally.counts.at_least_once() for tally in tally_passes(loaders, graphs, [(0, [0]), (1, [1])], 32,
                                                                          workers)]
    assert tallies == [32, 32]
    drawn = _lines(terminal.getvalue())
    counted = {int(line.split()[2]) for line in drawn if line.startswith('plan: counted ')}
    assert all(line.startswith('plan: counted ') and ' of 8 ranks (pass ' in line for line in drawn), drawn
    assert max(counted) > 0 and (workers > 1 or 0 in counted), drawn  # the workers may start before the first draw
    assert any('(pass 2 of 2)' in line for line in drawn), drawn


def on_terminal(args: list[str], cwd: Path) -> tuple[int, str, bytes]:
    """Run ``args`` with a pseudo-terminal as its standard error: the exit status, what it printed on its standard
    output (a file) and the bytes it drew on the terminal."""
    master, child = pty.openpty()
    with tempfile.TemporaryFile() as out:
        try:
            process = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=child, stdin=subprocess.DEVNULL,
                                       env=environment())
        finally:
            os.close(child)
        drawn = b''
        try:
            while chunk := os.read(master, 4096):
                drawn += chunk
        except OSError:  # EIO once the process closed its side of the terminal
            pass
        finally:
            os.close(master)
        status = process.wait(timeout=300)
        out.seek(0)
        return status, out.read().decode(), drawn


def test_audit_draws_on_a_terminal_and_prints_the_same_report(tmp_path: Path) -> None:
    folder = write_resumed_run(tmp_path / 'run' / 'ledger')
    status, out, drawn = on_terminal([sys.executable, '-c', WITHOUT_COMPOSER, 'audit', str(folder)], tmp_path)
    assert (status, out) == (0, RESUMED_RUN_AUDIT)  # as piped (tests/cli/test_command_without_composer.py)
    text = drawn.decode()
    assert text.startswith('\raudit: scanned 0 of 4 ledger files, 0 s'), text
    assert text.endswith('\r'), text  # erased: what the shell prints next starts on a clean line
    piped = subprocess.run([sys.executable, '-c', WITHOUT_COMPOSER, 'audit', str(folder)], cwd=tmp_path,
                           capture_output=True, env=environment(), timeout=120)
    assert (piped.returncode, piped.stdout.decode(), piped.stderr) == (0, RESUMED_RUN_AUDIT, b'')


@pytest.mark.skipif(not COMPOSER, reason='plan needs the composer extra')
def test_plan_draws_on_a_terminal_and_prints_the_same_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Through a terminal in a subprocess, and piped (pytest's capture) in this process."""
    from composer_sampling.recipes.cli import main

    args = ['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--world-size', '4', '--epochs', '1', '--proof', 'counted',
            '--workers', '2']
    status, out, drawn = on_terminal([sys.executable, '-m', 'composer_sampling', *args], tmp_path)
    assert status == 0, out + drawn.decode()
    assert re.fullmatch(r'(\rplan: counted [0-4] of 4 ranks, \d+ s *)+\r +\r', drawn.decode()), drawn  # erased
    assert main(args) == 0
    piped = capsys.readouterr()
    assert piped.err == ''

    def timeless(text: str) -> str:  # without the line that says how long the plan took
        return '\n'.join(line for line in text.splitlines() if not line.startswith('checked 1 pass on 4 ranks in '))

    assert timeless(piped.out) == timeless(out) and 'proof: counted' in out
