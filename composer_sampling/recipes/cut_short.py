"""What a run killed while Composer saved a checkpoint leaves after the latest one: a file of 0 bytes, or a zip
without its end record.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> (folder / 'empty.pt').write_bytes(b''), (folder / 'text.pt').write_bytes(b'hello')
    (0, 5)
    >>> cut_short(folder / 'empty.pt'), cut_short(folder / 'text.pt')
    (True, False)
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

__all__ = ['ZIP_MAGIC', 'cut_short', 'describe_file']

#: The first bytes of a zip archive's first local file header: what ``torch.save`` writes first.
ZIP_MAGIC = b'PK\x03\x04'


def cut_short(path: Path) -> bool:
    """Whether ``path`` is a regular file a save cut short: empty, or a zip archive without its end record.

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
