"""SamplerSync's checkpoint state: its versions, the state written, and the loaded one as one checked value."""

from __future__ import annotations

import dataclasses
from typing import Any

from composer_sampling._checkpoint.envelope import VersionPolicy, read_state, write_state
from composer_sampling._fingerprint import Fingerprint
from composer_sampling._graph.signatures import signature_difference
from composer_sampling._resume.data_identity import fingerprint_entry, read_fingerprint
from composer_sampling._resume.decide import Layout, ResumeRefusedError
from composer_sampling._validate import valid_int
from composer_sampling.permutation import MAX_DATA_SEED

__all__ = ['FINGERPRINT_SINCE', 'SYNC_STATE', 'LoadedSync', 'other_trainer', 'sync_state']


def _upgrade(version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A version 1 or 2 payload in version 3's meaning: before 3, 'global_batch' counted every rank's samples."""
    if version < 3 and payload.get('global_batch') is not None:
        replication = valid_int('SamplerSync state replication', payload.get('replication', 1), minimum=1)
        payload['global_batch'] = valid_int('SamplerSync state global_batch', payload['global_batch'], minimum=1) \
            // replication
    return payload


# 6: 'data_fingerprint' holds a fourth value, the dataset's sample count (None where unknown), and the fingerprint
# reads the edges of local stream shards and names a wrapper that does not declare passes_indices_through: a
# version 5 fingerprint of such data differs, and its refusal says why. 5: adds 'data_fingerprint', the train
# dataset's fingerprint as a (digest, source, covers content) tuple; a state of an earlier version has none, and its
# resume says so once. 4: 'order_signatures', 'epoch_seeds' and 'rng' are written as tuples ('epoch_seeds' as its
# (key, value) pairs): torch.distributed.checkpoint stores a tuple as one entry, where it splits a list of mappings,
# or a mapping, into one entry per item, which a sharded checkpoint's load template (the state before any fit, None
# there) cannot match. 3: 'global_batch' counts distinct samples a step (device batch x world size / replication);
# adds 'data_parallel_ranks', the RNG copy ('rng', 'rng_batch') and 'epoch_seeds'. 2 added 'replication' and
# 'global_batch'. Versions 1 to 5 load with defaults (version 1 states without 'version').
SYNC_STATE = VersionPolicy(current=6, missing_version=1, upgrade=_upgrade, kind_of=lambda payload: other_trainer(
    payload, 'Composer SamplerSync'))

#: The first version of SamplerSync's state that records the train dataset's fingerprint.
FINGERPRINT_SINCE = 5
#: The first version whose fingerprint follows this release's rules (stream shard edges, wrappers named).
FINGERPRINT_RULES_SINCE = 6

#: The keys only one trainer's SamplerSync writes: a state holding one of them is that trainer's.
_OWN_KEYS = {'Lightning SamplerSync': ('epoch', 'batches', 'epoch_done'),
             'Composer SamplerSync': ('replication', 'epoch_seeds', 'rng_batch')}


def other_trainer(payload: dict[str, Any], reader: str) -> str | None:
    """The SamplerSync that wrote ``payload``, when its keys say it is another trainer's than ``reader``'s.

    Example:
        >>> other_trainer({'epoch': 1, 'batches': 3, 'epoch_done': False}, 'Composer SamplerSync')
        'Lightning SamplerSync'
        >>> other_trainer({'data_seed': 3}, 'Composer SamplerSync') is None
        True
    """
    for writer, keys in _OWN_KEYS.items():
        if writer != reader and any(key in payload for key in keys):
            return writer
    return None


def _entry(value: Any) -> Any:
    """A list or mapping as one entry of a sharded checkpoint: a tuple (a mapping's items); None stays None.

    Example:
        >>> _entry([{'sampler': 'A'}]), _entry({'epoch': 1}), _entry(None)
        (({'sampler': 'A'},), (('epoch', 1),), None)
    """
    if value is None:
        return None
    return tuple(value.items()) if isinstance(value, dict) else tuple(value)


def sync_state(data_seed: int | None, signatures: list[dict[str, Any]] | None, replication: int, layout: Layout,
               epoch_seeds: dict[str, Any] | None, rng: dict[str, Any],
               fingerprint: Fingerprint | None = None) -> dict[str, Any]:
    """The state SamplerSync saves, in the current version (``rng``: the RNG copy, ``{'rng', 'rng_batch'}``).

    Example:
        >>> list(sync_state(7, None, 1, Layout(8, 2), None, {'rng': None, 'rng_batch': None}))[:3]
        ['version', 'data_seed', 'order_signatures']
    """
    return write_state(SYNC_STATE.current, {
        'data_seed': data_seed,
        'order_signatures': _entry(signatures),
        'replication': replication,
        'global_batch': layout.global_batch,
        'data_parallel_ranks': layout.data_parallel_ranks,
        'epoch_seeds': _entry(epoch_seeds),
        'rng': _entry(rng['rng']),
        'rng_batch': rng['rng_batch'],
        'data_fingerprint': fingerprint_entry(fingerprint),
    })


@dataclasses.dataclass(frozen=True)
class LoadedSync:
    """What the loaded checkpoint says about the data order: built and checked by :meth:`read` only.

    Example:
        >>> LoadedSync.read({'version': 3, 'data_seed': 11, 'replication': 2, 'global_batch': 16},
        ...                 error=ValueError).layout
        Layout(global_batch=16, data_parallel_ranks=None)
    """

    data_seed: int | None
    signatures: list[dict[str, Any]] | None
    replication: int
    layout: Layout  # the global batch and data-parallel ranks it trained with (None: not recorded)
    epoch_seeds: dict[str, Any] | None  # an epoch in flight that kept its samplers' own seeds (adoption)
    fingerprint: Fingerprint | None = None  # the train dataset's (None: written before any fit, or before version 5)
    fingerprint_required: bool = False  # whether the state's version records a fingerprint at every fit
    fingerprint_rules_older: bool = False  # whether its fingerprint was computed by an earlier release's rules

    @classmethod
    def read(cls, state: dict[str, Any], error: type[Exception]) -> LoadedSync:
        """Read a state of any version SamplerSync wrote (1 to 5); keys an older version lacks get defaults.

        ``error`` is raised for a version this release cannot read; a value of the wrong
        type or range raises ``TypeError`` or ``ValueError`` naming the key.
        """
        payload = read_state(state, 'Composer SamplerSync', SYNC_STATE, error=error)
        version = int(state.get('version', 1))  # a state before version 2 may have none
        since = FINGERPRINT_SINCE if version >= FINGERPRINT_SINCE else None
        loaded = cls.from_payload(payload, fingerprint_since=since)
        return dataclasses.replace(loaded, fingerprint_rules_older=version < FINGERPRINT_RULES_SINCE)

    @classmethod
    def from_payload(cls, state: dict[str, Any], fingerprint_since: int | None) -> LoadedSync:
        """Check the values of a state already read from its envelope (the Lightning callback's state holds the same
        keys); a value of the wrong type or range raises ``TypeError`` or ``ValueError`` naming the key.

        ``fingerprint_since``: the first version of this kind of state that records the fingerprint, when the state
        is of that version or newer (its ``data_fingerprint`` key must then be there); ``None`` for older states.
        """
        if fingerprint_since is not None and 'data_fingerprint' not in state:
            raise ValueError(f'SamplerSync state has no data_fingerprint, which every state of version '
                             f'{fingerprint_since} or newer holds: the state was edited or comes from elsewhere. '
                             'Resume from a checkpoint this release wrote')
        seed = state.get('data_seed')
        if seed is not None:
            seed = valid_int('SamplerSync state data_seed', seed, 0, MAX_DATA_SEED)
        signatures = state.get('order_signatures')
        if isinstance(signatures, tuple):  # version 4
            signatures = list(signatures)
        if signatures is not None and (
            not isinstance(signatures, list) or not all(isinstance(item, dict) for item in signatures)
        ):
            raise TypeError(
                f'SamplerSync state order_signatures must be a list of dicts or None, got {signatures!r:.200}',
            )
        replication = valid_int('SamplerSync state replication', state.get('replication', 1), minimum=1)
        global_batch = state.get('global_batch')
        if global_batch is not None:
            global_batch = valid_int('SamplerSync state global_batch', global_batch, minimum=1)
        ranks = state.get('data_parallel_ranks')
        if ranks is not None:
            ranks = valid_int('SamplerSync state data_parallel_ranks', ranks, minimum=1)
        epoch_seeds = state.get('epoch_seeds')
        if isinstance(epoch_seeds, tuple):  # version 4: its (key, value) pairs
            epoch_seeds = _pairs(epoch_seeds)
        if epoch_seeds is not None and not (isinstance(epoch_seeds, dict) and 'epoch' in epoch_seeds):
            raise TypeError(f'SamplerSync state epoch_seeds must be a dict with an epoch or None, got '
                            f'{epoch_seeds!r:.200}')
        fingerprint = read_fingerprint(state.get('data_fingerprint'), 'SamplerSync state data_fingerprint')
        return cls(seed, signatures, replication, Layout(global_batch, ranks), epoch_seeds, fingerprint,
                   fingerprint_since is not None)

    def check_graph(self, current: list[dict[str, Any]]) -> None:
        """Refuse a graph whose order signatures differ from the checkpoint's: the one resume check."""
        saved = self.signatures
        if not saved:
            return
        if len(saved) != len(current):
            raise ResumeRefusedError(
                f'SamplerSync: the checkpoint was written with samplers {saved}, the train dataloader now has '
                f'{current}; resuming would skip or repeat samples. Resume with the same sampler graph',
            )
        for before, now in zip(saved, current, strict=True):
            if before.get('sampler') != now.get('sampler'):
                raise ResumeRefusedError(
                    f'SamplerSync: the checkpoint was written with the sampler {before.get("sampler")}, the train '
                    f'dataloader now has {now.get("sampler")}; resuming would skip or repeat samples. Resume with '
                    f'{before.get("sampler")}',
                )
            difference = signature_difference(before, now)
            if difference:
                key, was, is_now = difference
                raise ResumeRefusedError(
                    f'SamplerSync: the checkpoint was written with {before.get("sampler")} {key}={was!r}, the '
                    f'train dataloader now has {key}={is_now!r}; resuming would skip or repeat samples. Resume '
                    'with the same dataset and sampler settings',
                )


def _pairs(value: tuple[Any, ...]) -> dict[str, Any] | tuple[Any, ...]:
    """A version 4 mapping back from its (key, value) pairs; anything else as it is, for the caller's type check."""
    if all(isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in value):
        return dict(value)
    return value
