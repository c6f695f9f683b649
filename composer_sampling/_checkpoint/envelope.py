"""One checkpoint envelope for every state of ours: ``version`` beside the payload's keys, one reader, one error format.

Every state composer-sampling writes (samplers, wrappers, ``SamplerSync``,
``SampleLedger``) is one flat mapping, ``{'version': N, **payload}``: the layout
every release has written, so a checkpoint stays byte-identical and a state written
by an older release reads as its version. The *kind* of a state is the reader that
loads it (a sampler class, a callback); where a state names what wrote it (a
sampler's order signature names its class), the policy's ``kind_of`` reads it, so a
state of another kind is refused naming both. :func:`write_state` builds a state;
:func:`read_state` checks it against a :class:`VersionPolicy`, brings an older
payload up to date and returns the payload. Every refusal has one format:
``"<Kind> state has version X; this version of composer-sampling reads versions A to
B. ..."`` or ``"this is a <Other> state, not a <Kind> state"``.

Example:
    >>> policy = VersionPolicy(current=2)
    >>> state = write_state(2, {'step': 7})
    >>> state
    {'version': 2, 'step': 7}
    >>> read_state(state, 'Mine', policy)
    {'step': 7}
    >>> read_state({'version': 3, 'step': 7}, 'Mine', policy)
    Traceback (most recent call last):
    ...
    ValueError: Mine state has version 3; this version of composer-sampling reads versions 1 to 2. Upgrade \
composer-sampling to resume this checkpoint
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from composer_sampling._validate import is_integer

__all__ = ['VERSION', 'VersionPolicy', 'payload_of', 'read_state', 'valid_version', 'write_state']

VERSION = 'version'
_UPGRADE_HINT = 'Upgrade composer-sampling to resume this checkpoint'


def _readable(oldest: int, newest: int) -> str:
    return f'version {oldest}' if oldest == newest else f'versions {oldest} to {newest}'


def valid_version(subject: str, version: Any, oldest: int, newest: int, *, noun: str = 'version', detail: str = '',
                  newer_hint: str = _UPGRADE_HINT, error: type[Exception] = ValueError) -> int:
    """Return ``version`` if it is an int (not a bool) in ``[oldest, newest]``; else raise ``error`` in one format.

    The message names ``subject``, the version, the readable range and ``detail``; a
    version newer than ``newest`` adds ``newer_hint``.

    Example:
        >>> valid_version('Mine state', 2, 1, 3)
        2
        >>> valid_version('Mine state', True, 1, 3)
        Traceback (most recent call last):
        ...
        ValueError: Mine state has version True; this version of composer-sampling reads versions 1 to 3
    """
    is_int = is_integer(version)
    if isinstance(version, int) and is_int and oldest <= version <= newest:
        return version
    hint = f'. {newer_hint}' if newer_hint and is_int and version > newest else ''
    raise error(f'{subject} has {noun} {version!r:.100}; this version of composer-sampling reads '
                f'{_readable(oldest, newest)}{detail}{hint}')


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions of one kind of state this code reads, and how an older payload is brought up to date.

    Args:
        current (int): the version written now.
        oldest (int): the oldest version read. Default: ``1``.
        missing_version (int, optional): the version of a state without a ``version`` key, written
            before states had one (``None``: such a state is refused).
        kind_of (callable, optional): the kind a payload names (``None`` if it names none), so a
            state of another kind is refused with both names.
        upgrade (callable, optional): ``upgrade(version, payload)`` returns the payload of an older
            version in the current meaning; called for every version below ``current``.
    """

    current: int
    oldest: int = 1
    missing_version: int | None = None
    kind_of: Callable[[dict[str, Any]], Any] | None = None
    upgrade: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None

    def check(self, kind: str, version: Any, *, error: type[Exception] = ValueError) -> int:
        """``version`` if this policy reads it, else ``error`` naming the readable range."""
        return valid_version(f'{kind} state', version, self.oldest, self.current, error=error)


def write_state(version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A state: ``version`` first, then the payload's keys.

    Example:
        >>> write_state(1, {'lineage': 'abc'})
        {'version': 1, 'lineage': 'abc'}
    """
    if VERSION in payload:
        raise ValueError(f'a state payload cannot hold the key {VERSION!r}: the envelope writes it')
    return {VERSION: version, **payload}


def read_state(state: Any, kind: str, policy: VersionPolicy, *, error: type[Exception] = ValueError) -> dict[str, Any]:
    """The payload of ``state`` in the current version's meaning; refuses another kind or an unread version.

    A refusal (another kind, a version not read, a missing version) is raised as
    ``error``, a ``ValueError`` or a subclass; a state that is not a dict as ``TypeError``.

    Example:
        >>> read_state({'lineage': 'abc'}, 'SampleLedger', VersionPolicy(current=1, missing_version=1))
        {'lineage': 'abc'}
    """
    if not isinstance(state, dict):
        raise TypeError(f'{kind}.load_state_dict expects a dict, got {state!r:.100} ({type(state).__name__})')
    payload = {key: value for key, value in state.items() if key != VERSION}
    named = policy.kind_of(payload) if policy.kind_of is not None else None
    if named is not None and named != kind:
        raise error(f'this is a {named!s:.100} state, not a {kind} state')
    if VERSION not in state and policy.missing_version is None:
        raise error(f'{kind} state is missing {[VERSION]}; it holds {sorted(state)}')
    version = policy.check(kind, state.get(VERSION, policy.missing_version), error=error)
    if version < policy.current and policy.upgrade is not None:
        payload = policy.upgrade(version, payload)
    return payload


def payload_of(state: Any) -> dict[str, Any] | None:
    """The payload of a state without checks; ``None`` for anything but a dict.

    For tools that only peek into a checkpoint (the data seed a run was trained with).

    Example:
        >>> payload_of({'version': 3, 'data_seed': 3})
        {'data_seed': 3}
    """
    if not isinstance(state, dict):
        return None
    return {key: value for key, value in state.items() if key != VERSION}
