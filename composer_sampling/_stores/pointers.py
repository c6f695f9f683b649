"""Following Composer's ``.symlink`` pointer objects a bounded number of times.

Composer writes ``latest-rank0.pt.symlink`` beside remote checkpoints: an object whose
text is the name of the checkpoint it points to. Composer's ``get_file`` follows such a
pointer by calling itself, with no bound: a pointer that names itself recursed until
Python's recursion limit, and an empty one reached the store as an empty object name.
:func:`follow_pointers` takes the steps ``get_file`` takes (a name ending in ``.symlink``
is read and its text followed; a missing name is tried again with ``.symlink`` added),
at most :data:`MAX_POINTERS` pointers in a row, and raises :class:`PointerError` naming
the pointer and what is wrong with it. It reaches the store only through the two
functions it is given, so it holds no client of its own.

Example:
    >>> store = {'run/ep1-ba4-rank0.pt': b'...', 'run/latest-rank0.pt.symlink': b'run/ep1-ba4-rank0.pt'}
    >>> follow_pointers('run/latest-rank0.pt', store.__contains__, lambda name: store[name].decode())
    'run/ep1-ba4-rank0.pt'
    >>> store['run/latest-rank0.pt.symlink'] = b'run/latest-rank0.pt.symlink'
    >>> follow_pointers('run/latest-rank0.pt', store.__contains__, lambda name: store[name].decode())
    Traceback (most recent call last):
    ...
    composer_sampling._stores.pointers.PointerError: the pointer run/latest-rank0.pt.symlink names itself, so it ...
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ['MAX_POINTERS', 'MAX_POINTER_BYTES', 'POINTER_SUFFIX', 'PointerError', 'follow_pointers']

#: The suffix of Composer's pointer objects (``create_symlink_file``).
POINTER_SUFFIX = '.symlink'
#: Pointers followed in a row before the chain is refused. Composer writes one, pointing at a checkpoint.
MAX_POINTERS = 8
#: The largest pointer object read. Composer's hold one object name, which S3 keeps under 1,024 bytes.
MAX_POINTER_BYTES = 4096
#: The way out every refusal ends with.
WAY_OUT = 'write the name of a checkpoint into the pointer, or name the checkpoint itself instead of the pointer'


class PointerError(ValueError):
    """A pointer object that leads nowhere: empty, naming itself, in a loop, too long a chain, or naming nothing."""


def follow_pointers(name: str, exists: Callable[[str], bool], read: Callable[[str], str],
                    shown: Callable[[str], str] = str, limit: int = MAX_POINTERS) -> str:
    """The object ``name`` leads to when pointers are followed as Composer's ``get_file`` follows them.

    Args:
        name: the object asked for, as a name in the store.
        exists: whether an object of that name is in the store (errors other than a missing object raise).
        read: the text of a pointer object, its surrounding whitespace kept.
        shown: how a message names an object (its URI).
        limit: the pointers followed in a row before the chain is refused.

    Returns ``name`` itself when it is not a pointer and exists, or when it is not
    there at all (nor ``name + '.symlink'``): the download that follows names it as
    missing. A pointer's text is read without its surrounding whitespace.

    Raises:
        PointerError: a pointer that is empty, names itself, leads back to one already
            followed, names an object that does not exist, or starts a chain longer than ``limit``.

    Example:
        >>> store = {'a.symlink': 'b', 'b.symlink': 'a.symlink'}
        >>> follow_pointers('a', store.__contains__, store.__getitem__)
        Traceback (most recent call last):
        ...
        composer_sampling._stores.pointers.PointerError: the pointer b.symlink names a.symlink, a pointer already ...
    """
    followed: list[str] = []
    current = name
    while True:
        if exists(current):
            if not current.endswith(POINTER_SUFFIX):
                return current
        elif current.endswith(POINTER_SUFFIX) or not exists(current + POINTER_SUFFIX):
            if not followed:
                return current
            nor = '' if current.endswith(POINTER_SUFFIX) else f', nor is {current}{POINTER_SUFFIX}'
            raise PointerError(f'the pointer {shown(followed[-1])} names {current}, which is not in the object '
                               f'store{nor}; {WAY_OUT}')
        else:
            current += POINTER_SUFFIX
        _check_next(current, followed, shown, limit)
        followed.append(current)
        target = read(current).strip()
        if not target:
            raise PointerError(f'the pointer {shown(current)} is empty: it names no object, where Composer writes '
                               f'the name of a checkpoint; {WAY_OUT}')
        current = target


def _check_next(pointer: str, followed: list[str], shown: Callable[[str], str], limit: int) -> None:
    """Refuse to follow ``pointer`` when it was followed already (itself, or a loop) or the chain is at ``limit``."""
    if pointer in followed:
        if pointer == followed[-1]:
            raise PointerError(f'the pointer {shown(pointer)} names itself, so it names no checkpoint; {WAY_OUT}')
        loop = ' -> '.join(shown(step) for step in [*followed[followed.index(pointer):], pointer])
        raise PointerError(f'the pointer {shown(followed[-1])} names {shown(pointer)}, a pointer already followed: '
                           f'the pointers form the loop {loop} and name no checkpoint; {WAY_OUT}')
    if len(followed) == limit:
        raise PointerError(f'{shown(followed[0])} starts a chain of more than {limit} pointers '
                           f'({" -> ".join(shown(step) for step in followed[:3])} -> ...), where Composer writes one '
                           f'pointer to a checkpoint; {WAY_OUT}')
