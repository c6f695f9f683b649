"""One layout for every checkpoint state, ``{'kind', 'version', 'payload'}``, and one reader with a version policy.

A state says what wrote it (``kind``: a class name), the version of its payload's
meaning, and the payload itself. :func:`write_state` builds one;
:func:`read_state` checks the kind and the version against a
:class:`VersionPolicy`, brings an older payload up to date, and returns it. States
written before the envelope existed (*flat*: the payload's keys and ``version`` at
the top level) are read as the versions they were. Every refusal has one format:
``"<Kind> state has version X; this version of composer-sampling reads versions A to
B. ..."`` or ``"this is a <Other> state, not a <Kind> state"``.

Example:
    >>> policy = VersionPolicy(current=2, flat=(1,), flat_default=1)
    >>> state = write_state('Mine', 2, {'step': 7})
    >>> state
    {'kind': 'Mine', 'version': 2, 'payload': {'step': 7}}
    >>> read_state(state, 'Mine', policy), read_state({'version': 1, 'step': 3}, 'Mine', policy)
    ({'step': 7}, {'step': 3})
    >>> read_state(write_state('Other', 2, {}), 'Mine', policy)
    Traceback (most recent call last):
    ...
    ValueError: this is a Other state, not a Mine state
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ['KIND', 'PAYLOAD', 'VERSION', 'VersionPolicy', 'check_version', 'payload_of', 'read_state', 'write_state']

KIND = 'kind'
VERSION = 'version'
PAYLOAD = 'payload'
_UPGRADE_HINT = 'Upgrade composer-sampling to resume this checkpoint'


def _readable(oldest: int, newest: int) -> str:
    return f'version {oldest}' if oldest == newest else f'versions {oldest} to {newest}'


def check_version(subject: str, version: Any, oldest: int, newest: int, *, noun: str = 'version', detail: str = '',
                  newer_hint: str = _UPGRADE_HINT, error: type[Exception] = ValueError) -> int:
    """Return ``version`` if it is an int (not a bool) in ``[oldest, newest]``; else raise ``error`` in one format.

    The message names ``subject``, the version, the readable range and ``detail``; a
    version newer than ``newest`` adds ``newer_hint``.

    Example:
        >>> check_version('Mine state', 2, 1, 3)
        2
        >>> check_version('Mine state', True, 1, 3)
        Traceback (most recent call last):
        ...
        ValueError: Mine state has version True; this version of composer-sampling reads versions 1 to 3
    """
    is_int = isinstance(version, int) and not isinstance(version, bool)
    if isinstance(version, int) and is_int and oldest <= version <= newest:
        return version
    hint = f'. {newer_hint}' if newer_hint and is_int and version > newest else ''
    raise error(f'{subject} has {noun} {version!r:.100}; this version of composer-sampling reads '
                f'{_readable(oldest, newest)}{detail}{hint}')


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions of one kind of state this code reads, and how an older payload is brought up to date.

    Args:
        current (int): the version written now (inside the envelope).
        oldest (int): the oldest version read. Default: ``1``.
        flat (tuple[int, ...]): versions written flat, before the envelope, and still read.
        flat_default (int, optional): the version of a flat state without a ``version`` key
            (``None``: such a state is refused).
        flat_kind (callable, optional): the kind a flat state names (``None`` if it names none),
            so a state of another class is refused with both names.
        upgrade (callable, optional): ``upgrade(version, payload)`` returns the payload of an older
            version in the current meaning; called for every version below ``current``.
    """

    current: int
    oldest: int = 1
    flat: tuple[int, ...] = ()
    flat_default: int | None = None
    flat_kind: Callable[[dict[str, Any]], Any] | None = None
    upgrade: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None

    def check(self, kind: str, version: Any, *, error: type[Exception] = ValueError) -> int:
        """``version`` if this policy reads it, else ``error`` naming the readable range."""
        return check_version(f'{kind} state', version, self.oldest, self.current, error=error)


def write_state(kind: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """The envelope of a state: who wrote it, the version of its meaning, and the payload.

    Example:
        >>> write_state('SampleLedger', 2, {'lineage': 'abc'})['payload']
        {'lineage': 'abc'}
    """
    return {KIND: kind, VERSION: version, PAYLOAD: payload}


def _is_envelope(state: dict[str, Any]) -> bool:
    return KIND in state or PAYLOAD in state


def _open_envelope(state: dict[str, Any], kind: str, policy: VersionPolicy,
                   error: type[Exception]) -> tuple[int, dict[str, Any]]:
    missing = [key for key in (KIND, VERSION, PAYLOAD) if key not in state]
    if missing:
        raise error(f'{kind} state is missing {missing}; it holds {sorted(state)}')
    if state[KIND] != kind:
        raise error(f'this is a {state[KIND]!s:.100} state, not a {kind} state')
    version = policy.check(kind, state[VERSION], error=error)
    payload = state[PAYLOAD]
    if not isinstance(payload, dict):
        raise TypeError(f'{kind} state payload must be a dict, got {payload!r:.200}')
    return version, payload


def _open_flat(state: dict[str, Any], kind: str, policy: VersionPolicy,
               error: type[Exception]) -> tuple[int, dict[str, Any]]:
    named = policy.flat_kind(state) if policy.flat_kind is not None else None
    if named is not None and named != kind:
        raise error(f'this is a {named!s:.100} state, not a {kind} state')
    if VERSION not in state and policy.flat_default is None:
        raise error(f'{kind} state is missing {[VERSION]}; it holds {sorted(state)}')
    version = policy.check(kind, state.get(VERSION, policy.flat_default), error=error)
    if version not in policy.flat:
        raise error(f'{kind} state has version {version} without the envelope ({KIND}, {VERSION}, {PAYLOAD}) '
                         f'that version {version} is written in; it holds {sorted(state)}')
    return version, {key: value for key, value in state.items() if key != VERSION}


def read_state(state: Any, kind: str, policy: VersionPolicy, *, error: type[Exception] = ValueError) -> dict[str, Any]:
    """The payload of ``state`` in the current version's meaning; refuses another kind or an unread version.

    ``state`` is an envelope from :func:`write_state`, or a flat state of one of
    ``policy.flat`` versions (its keys without ``version`` become the payload). A
    refusal (another kind, a version not read, a missing key) is raised as ``error``,
    a ``ValueError`` or a subclass; a state that is not a dict as ``TypeError``.

    Example:
        >>> read_state({'kind': 'Mine', 'version': 3, 'payload': {}}, 'Mine', VersionPolicy(current=2))
        Traceback (most recent call last):
        ...
        ValueError: Mine state has version 3; this version of composer-sampling reads versions 1 to 2. Upgrade \
composer-sampling to resume this checkpoint
    """
    if not isinstance(state, dict):
        raise TypeError(f'{kind}.load_state_dict expects a dict, got {state!r:.100} ({type(state).__name__})')
    opened = _open_envelope if _is_envelope(state) else _open_flat
    version, payload = opened(state, kind, policy, error)
    if version < policy.current and policy.upgrade is not None:
        payload = policy.upgrade(version, dict(payload))
    return payload


def payload_of(state: Any, kind: str) -> dict[str, Any] | None:
    """The payload of a ``kind`` state, envelope or flat, without checks; ``None`` for anything else.

    For tools that only peek into a checkpoint (the data seed a run was trained with).

    Example:
        >>> payload_of({'kind': 'SamplerSync', 'version': 4, 'payload': {'data_seed': 3}}, 'SamplerSync')
        {'data_seed': 3}
        >>> payload_of({'version': 3, 'data_seed': 3}, 'SamplerSync')
        {'version': 3, 'data_seed': 3}
    """
    if not isinstance(state, dict):
        return None
    if not _is_envelope(state):
        return state
    payload = state.get(PAYLOAD)
    return payload if state.get(KIND) == kind and isinstance(payload, dict) else None
