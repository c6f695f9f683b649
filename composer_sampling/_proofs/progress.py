"""A line on the terminal that a long count rewrites in place: the progress of ``audit`` and of the counted proof.

The loops report their progress to :func:`current_progress`, which draws nothing
unless a command asked for a line with :func:`showing_progress` and its stream is a
terminal. So a call from Python, and a command whose standard error is piped or
redirected to a file, print nothing more than before. On a terminal, the line is
drawn at the first report, then at most once every ``interval`` seconds, and erased
when the command's count ends, before the command prints its report.

Example:
    >>> import io
    >>> with showing_progress('audit', io.StringIO()):  # not a terminal: nothing is drawn
    ...     current_progress().update(3, 10, 'scanned {done} of {total} ledger files')
    >>> current_progress().active  # outside of showing_progress, no line at all
    False
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ['INTERVAL', 'Progress', 'current_progress', 'elapsed_text', 'showing_progress']

#: The shortest time between two draws of the line, in seconds.
INTERVAL = 0.25


class Progress:
    """The progress line of one command, drawn on ``stream`` (a terminal), or nothing when ``stream`` is None.

    ``update`` costs one clock read between two draws, so a loop may call it once
    per file, per rank or per chunk without slowing down measurably.

    Args:
        command (str): the name the line starts with, e.g. ``'audit'``.
        stream (TextIO | None): where to draw the line, or ``None`` to draw nothing.
        interval (float): the shortest time between two draws, in seconds. Default: :data:`INTERVAL`.

    Example:
        >>> import io
        >>> class Terminal(io.StringIO):
        ...     def isatty(self):
        ...         return True
        >>> terminal = Terminal()
        >>> line = Progress('audit', terminal)
        >>> line.update(312, 1024, 'scanned {done} of {total} ledger files')
        >>> line.update(313, 1024, 'scanned {done} of {total} ledger files')  # too soon: not drawn
        >>> terminal.getvalue()
        '\\raudit: scanned 312 of 1,024 ledger files, 0 s'
    """

    def __init__(self, command: str, stream: TextIO | None, interval: float = INTERVAL) -> None:
        self.command = command
        self.stream = stream
        self.interval = interval
        self.started = time.monotonic()
        self._next = 0.0  # the first report is drawn at once
        self._width = 0  # the length of the line on the terminal, to erase it

    @property
    def active(self) -> bool:
        """Whether this line is drawn at all."""
        return self.stream is not None

    def update(self, done: int, total: int, text: str) -> None:
        """Report ``done`` of ``total``; ``text`` holds ``{done}`` and ``{total}``, filled with thousands separators.

        The line is drawn only when ``interval`` seconds have passed since the last draw.
        """
        if self.stream is None:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        self.draw(f'{text.format(done=f"{done:,}", total=f"{total:,}")}, {elapsed_text(now - self.started)}')

    def draw(self, text: str) -> None:
        """Replace the line with ``command: text`` now, whatever the time since the last draw."""
        if self.stream is None:
            return
        line = f'{self.command}: {text}'
        self.stream.write('\r' + line + ' ' * max(0, self._width - len(line)))
        self.stream.flush()
        self._width = len(line)

    def erase(self) -> None:
        """Erase the line and leave the cursor at its start, where it was before the first draw."""
        if self.stream is None or not self._width:
            return
        self.stream.write('\r' + ' ' * self._width + '\r')
        self.stream.flush()
        self._width = 0


#: What :func:`current_progress` returns outside :func:`showing_progress`: a line that draws nothing.
_SILENT = Progress('', None)
_CURRENT: contextvars.ContextVar[Progress] = contextvars.ContextVar('composer_sampling_progress', default=_SILENT)


def current_progress() -> Progress:
    """The progress line of the command running in this context: the one :func:`showing_progress` set, else silent."""
    return _CURRENT.get()


@contextmanager
def showing_progress(command: str, stream: TextIO, interval: float = INTERVAL) -> Iterator[Progress]:
    """Within the block, the long loops draw their progress on ``stream`` when it is a terminal, and nothing else.

    The line is erased when the block ends, also when it raises, so what the command
    prints next starts on a clean line.

    Example:
        >>> import sys
        >>> with showing_progress('plan', sys.stderr) as line:  # a terminal under a shell, a pipe under pytest
        ...     line.update(5120, 16384, 'counted {done} of {total} ranks')
    """
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # a closed stream, or an object without isatty
        terminal = False
    line = Progress(command, stream if terminal else None, interval)
    token = _CURRENT.set(line)
    try:
        yield line
    finally:
        _CURRENT.reset(token)
        line.erase()


def elapsed_text(seconds: float) -> str:
    """``seconds`` as the progress line shows it: whole seconds, then minutes and seconds, then hours and minutes.

    Example:
        >>> elapsed_text(18.4), elapsed_text(62), elapsed_text(3 * 3600 + 125)
        ('18 s', '1 min 2 s', '3 h 2 min')
    """
    whole = int(seconds)
    if whole < 60:
        return f'{whole} s'
    if whole < 3600:
        return f'{whole // 60} min {whole % 60} s'
    return f'{whole // 3600} h {whole % 3600 // 60} min'
