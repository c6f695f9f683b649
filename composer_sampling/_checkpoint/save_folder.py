"""A local save folder after a stop: the checkpoints later than the one a fit resumes, and the one file that a save
cut short, which alone may be set aside.

Composer writes a checkpoint in place (``open(name, 'wb')``, then ``torch.save``) and links
``latest-rank0.pt`` to it only once the file is whole. Its ``CheckpointSaver`` refuses, at
fit start, a folder that holds a checkpoint later than the fit's timestamp
(``FileExistsError: ... may conflict with a future checkpoint``). A run killed while it
saved leaves exactly one such file: the checkpoint it was writing, cut short, after the
one that ``latest-rank0.pt`` links to.

The recipe runner (before Composer loads a checkpoint) and the Composer callbacks (at fit
start, before the saver's check) make one decision here. :func:`later_checkpoints` lists
what follows the fit's start, :attr:`LaterCheckpoints.interrupted` says whether that is
the one file a crash can leave, :func:`set_aside_interrupted` moves that file and nothing
else, and :func:`later_problem` words the refusal of anything else. Every move is decided
before any is made, and nothing is deleted.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / 'ep0-ba2-rank0.pt').write_bytes(b'whole'), (folder / 'ep0-ba3-rank0.pt').write_bytes(b'')
    >>> (folder / 'latest-rank0.pt').symlink_to('ep0-ba2-rank0.pt')
    >>> later = later_checkpoints(folder, (0, 2), folder / 'latest-rank0.pt')
    >>> [path.name for path in later.files], later.interrupted
    (['ep0-ba3-rank0.pt'], True)
"""

from __future__ import annotations

import itertools
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ['CHECKPOINT_PATTERN', 'LATEST_NAME', 'ZIP_MAGIC', 'LaterCheckpoints', 'checkpoint_time', 'cut_short',
           'describe_file', 'describe_latest', 'first_names', 'later_checkpoints', 'later_names', 'later_problem',
           'set_aside_interrupted']

#: Rank 0's checkpoint names as Composer's default ``save_filename`` writes them and its
#: ``ensure_folder_has_no_conflicting_files`` matches them, and its link to the latest.
CHECKPOINT_PATTERN = re.compile(r'^ep(?P<epoch>\d+)-ba(?P<batch>\d+)-rank0\.pt$')
LATEST_NAME = 'latest-rank0.pt'
#: The first bytes of a zip archive's first local file header: what ``torch.save`` writes first.
ZIP_MAGIC = b'PK\x03\x04'


def cut_short(path: Path) -> bool:
    """Whether ``path`` is a regular file that a save cut short: empty, or a zip archive without its end record.

    Example:
        >>> cut_short(Path('/nonexistent/ep0-ba1-rank0.pt'))
        False
    """
    if path.is_symlink() or not path.is_file():
        return False
    if path.stat().st_size == 0:
        return True
    with open(path, 'rb') as file:
        head = file.read(len(ZIP_MAGIC))
    return head == ZIP_MAGIC and not zipfile.is_zipfile(path)


def describe_file(path: Path) -> str:
    """A save folder's entry as a message names it: a link and where it points, or a file and its size.

    Example:
        >>> describe_file(Path('/nonexistent/ep0-ba1-rank0.pt'))
        'ep0-ba1-rank0.pt (missing)'
    """
    if path.is_symlink():
        return f'{path.name} (a link to {os.readlink(path)}{", which does not exist" if not path.exists() else ""})'
    if not path.exists():
        return f'{path.name} (missing)'
    if not path.is_file():
        return f'{path.name} (a folder)'
    return f'{path.name} ({path.stat().st_size} bytes{", cut short" if cut_short(path) else ""})'


def checkpoint_time(name: str) -> tuple[int, int] | None:
    """The epoch and batch of rank 0's checkpoint ``name``, or ``None`` for another file.

    Example:
        >>> checkpoint_time('ep1-ba12-rank0.pt'), checkpoint_time('latest-rank0.pt')
        ((1, 12), None)
    """
    found = CHECKPOINT_PATTERN.match(name)
    return None if found is None else (int(found['epoch']), int(found['batch']))


def later_names(names: list[str], start: tuple[int, int]) -> list[str]:
    """The rank 0 checkpoints of ``names`` that Composer's saver finds later than a fit starting at ``start``
    (an epoch and a batch), in training order.

    Example:
        >>> later_names(['ep0-ba2-rank0.pt', 'ep1-ba4-rank0.pt', 'ep1-ba4-rank1.pt', 'latest-rank0.pt.symlink'],
        ...             (0, 2))
        ['ep1-ba4-rank0.pt']
    """
    later = [(time, name) for name in names
             if (time := checkpoint_time(name)) is not None and (time[0] > start[0] or time[1] > start[1])]
    return [name for _, name in sorted(later)]


def first_names(names: list[str]) -> str:
    """The first three of ``names``, and ``...`` when there are more."""
    return ', '.join(names[:3]) + (', ...' if len(names) > 3 else '')


@dataclass(frozen=True)
class LaterCheckpoints:
    """The checkpoints of a local save folder later than the point a fit starts at (Composer refuses to start over
    them)."""

    folder: Path
    start: tuple[int, int]  # the epoch and batch the fit starts at
    resumed: Path | None  # the file the fit loads, links followed; None when it loads none
    latest: bool  # whether that file is the one the folder's latest-rank0.pt links to, in the folder
    files: list[Path]  # in training order

    @property
    def link(self) -> Path:
        """The folder's link to its latest checkpoint (rank 0's)."""
        return self.folder / LATEST_NAME

    @property
    def interrupted(self) -> bool:
        """Whether the files are one checkpoint cut short after the latest one, which the fit resumes: what a run
        killed while saving leaves, and the only thing ever set aside."""
        return self.latest and len(self.files) == 1 and cut_short(self.files[0])


def later_checkpoints(folder: Path, start: tuple[int, int], resumed: Path | None) -> LaterCheckpoints:
    """What the local save folder ``folder`` holds later than ``start``, for a fit that loads ``resumed``.

    Example:
        >>> import tempfile
        >>> later_checkpoints(Path(tempfile.mkdtemp()), (0, 0), None).files
        []
    """
    target = None if resumed is None else resumed.resolve()
    link = folder / LATEST_NAME
    latest = target is not None and link.is_symlink() and link.resolve() == target and \
        target.parent == folder.resolve()
    later = later_names([path.name for path in folder.iterdir()], start)
    return LaterCheckpoints(folder, start, target, latest, [folder / name for name in later])


def describe_latest(link: Path) -> str:
    """What is wrong with a save folder's ``latest-rank0.pt`` as a link to its latest checkpoint, or ``''``.

    Example:
        >>> describe_latest(Path('/nonexistent/latest-rank0.pt'))
        ''
    """
    if link.is_symlink():
        if not link.exists():
            return f'{link.name} links to {os.readlink(link)}, which does not exist'
        if link.resolve().parent != link.parent.resolve():
            return f'{link.name} links to {os.readlink(link)}, outside the folder'
        return ''
    if link.exists():
        return (f'{link.name} is a plain file, not a link, as a copy made with cp -L or rsync leaves it: which '
                'checkpoint is the latest cannot be told')
    return ''


def later_problem(later: LaterCheckpoints, shown: str, field: str = 'load_path') -> str | None:
    """The refusal of ``later``'s files, unless there are none or a save cut them short; else ``None``.

    ``shown`` is the save folder as the message names it, ``field`` what chose the checkpoint resumed.
    """
    if not later.files or later.interrupted:
        return None
    if later.latest:
        assert later.resumed is not None, 'a latest checkpoint is one the fit loads'
        found = first_names([describe_file(path) for path in later.files])
        return (f'save_folder {shown} holds {found} after {later.resumed.name}, the latest checkpoint, which this run '
                'resumes. A run that stopped while saving leaves at most the one checkpoint it was writing, cut short '
                '(0 bytes, or a zip without its end record); these were written by a run that went on, or by another '
                'run, and this run would write them again (Composer refuses to write over them). Move them out of '
                'the folder to keep them, choose another save_folder, or set save_overwrite: true to replace them')
    link, names = later.link, [path.name for path in later.files]
    wrong = describe_latest(link)
    ways = 'choose another save_folder for this run, or set save_overwrite: true to replace them'
    if link.is_symlink() and not wrong:
        ways = f"resume from the folder's latest (load_path={link}), {ways}"
    elif wrong:
        ways = f'make {link.name} a link to the checkpoint to resume (ln -sfn {names[-1]} {link}), {ways}'
    resumed = 'no checkpoint' if later.resumed is None else later.resumed.name
    if later.resumed is not None and checkpoint_time(resumed) is None:
        resumed = f'{resumed}, at epoch {later.start[0]}, batch {later.start[1]}'
    return (f'save_folder {shown} holds {first_names(names)}, checkpoints later than the one {field} resumes '
            f'({resumed}){f" ({wrong})" if wrong else ""}, which this run would write again; Composer refuses to write '
            f'over them. {ways[0].upper()}{ways[1:]}')


def set_aside_interrupted(later: LaterCheckpoints | None) -> Path | None:
    """Move what a save cut short left (:attr:`LaterCheckpoints.interrupted`) into a new ``interrupted-N`` folder in
    the save folder, and say so; return that folder, or ``None`` when there is nothing to move. Nothing is deleted.

    Example:
        >>> set_aside_interrupted(None) is None  # nothing a save cut short left
        True
    """
    if later is None or not later.interrupted:
        return None
    folder = later.folder
    names = (folder / f'interrupted-{k}' for k in itertools.count(1))
    target = next(path for path in names if not os.path.lexists(path))  # a dangling link holds its name too
    moved = [f'{path.name} ({path.stat().st_size} bytes)' for path in later.files]  # decided before any move
    target.mkdir()
    for path in later.files:
        os.replace(path, target / path.name)  # a rename within the folder: the bytes are never copied
    resumed = later.resumed.name if later.resumed is not None else ''
    print(f'save_folder {folder}: moved {", ".join(moved)} to {target}: cut short after {resumed}, the latest '
          'checkpoint, which this run resumes, by a run that stopped while saving; Composer would refuse to write '
          'over it', flush=True)
    return target
