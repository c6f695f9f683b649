"""The data order's checkpoint state: one schema for every trainer, its versions, and the loaded state as one checked
value.

Every adapter (Composer's ``SamplerSync``, Lightning's, the Hugging Face one, a loop
with :class:`~composer_sampling.DataOrder`) writes :func:`order_state`: the data seed,
the order signatures, the layout, the dataset's fingerprint, where the fit stood (the
epoch, the batches trained in it, whether it had ended), every rank's RNG state and,
for a graph that orders by nothing of ours, every rank's digest of the index lists its
epoch trained. ``trainer`` names the adapter that wrote it. :meth:`LoadedOrder.read`
reads that state under any adapter, and the states of earlier releases too: Composer's
versions 1 to 5 and Lightning's versions 1 and 2, each only under its own trainer (a
state of the other trainer's earlier kind is refused by name).

Plain values only (numbers, strings, tuples and CPU tensors): a checkpoint that holds
the state loads with ``torch.load(weights_only=True)``, and a sharded checkpoint
(``torch.distributed.checkpoint``) stores each tuple as one entry.

Example:
    >>> state = order_state(trainer='loop', data_seed=7, signatures=None, replication=1, layout=Layout(8, 2),
    ...                     fingerprint=None, place=(1, 3, False), rng=None, rng_batch=None, epoch_seeds=None,
    ...                     digests=None)
    >>> loaded = LoadedOrder.read(state, reader='DataOrder')
    >>> loaded.data_seed, loaded.place, loaded.trainer
    (7, (1, 3, False), 'loop')
"""

from __future__ import annotations

import dataclasses
from typing import Any

from composer_sampling._checkpoint.envelope import VERSION, VersionPolicy, read_state, write_state
from composer_sampling._fingerprint import Fingerprint
from composer_sampling._graph.signatures import signature_difference
from composer_sampling._resume import rng_state
from composer_sampling._resume.data_identity import fingerprint_entry, read_fingerprint
from composer_sampling._resume.decide import Layout
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.errors import DataOrderError
from composer_sampling.permutation import MAX_DATA_SEED

__all__ = ['ORDER_STATE', 'TRAINERS', 'LoadedOrder', 'order_state']


#: The adapters that write the state, as its ``trainer`` names them, and how messages name each one's callback.
TRAINERS = {'composer': 'Composer SamplerSync', 'lightning': 'Lightning SamplerSync',
            'transformers': 'Hugging Face SamplerSync', 'loop': 'DataOrder'}

#: 6: one schema for every trainer: Composer's keys, and 'trainer', 'epoch', 'batches', 'epoch_done', 'samples'
#: (the distinct samples of the epoch trained across the data-parallel ranks, exact after a resume on another
#: number of ranks, where the batches the trainer counts were not all of one size) and 'batch_digests';
#: 'data_fingerprint' holds a fourth value, the sample count, and the fingerprint reads the edges of local stream
#: shards and names a wrapper that does not declare passes_indices_through (a fingerprint of an earlier version
#: differs for such data, and its refusal says why).
#: Composer's earlier states: 5 added 'data_fingerprint' as a (digest, source, covers content) tuple. 4 wrote
#: 'order_signatures', 'epoch_seeds' and 'rng' as tuples ('epoch_seeds' as its (key, value) pairs):
#: torch.distributed.checkpoint stores a tuple as one entry, where it splits a list of mappings, or a mapping, into
#: one entry per item, which a sharded checkpoint's load template (the state before any fit, None there) cannot
#: match. 3: 'global_batch' counts distinct samples a step (device batch x world size / replication); added
#: 'data_parallel_ranks', the RNG copy ('rng', 'rng_batch') and 'epoch_seeds'. 2 added 'replication' and
#: 'global_batch'. 1 had no 'version'.
#: Lightning's earlier states: 1 held Composer's keys but 'replication', 'epoch_seeds' and 'rng_batch', and 'epoch',
#: 'batches', 'epoch_done'; 2 added 'data_fingerprint'.
ORDER_STATE = VersionPolicy(current=6, missing_version=1)

_COMPOSER_BEFORE = VersionPolicy(current=5, missing_version=1)
_LIGHTNING_BEFORE = VersionPolicy(current=2)
#: The keys every state of version 6 holds, in the order they are written.
_KEYS = ('data_seed', 'order_signatures', 'replication', 'global_batch', 'data_parallel_ranks', 'epoch_seeds', 'rng',
         'rng_batch', 'data_fingerprint', 'trainer', 'epoch', 'batches', 'epoch_done', 'samples', 'batch_digests')
#: The keys only one trainer's earlier states hold: a state without ``trainer`` that holds one of them is that kind.
_LIGHTNING_KEYS = ('epoch', 'batches', 'epoch_done')
_COMPOSER_KEYS = ('replication', 'epoch_seeds', 'rng_batch')


def _earlier_kind(state: dict[str, Any], reader: str) -> str:
    """The adapter whose earlier kind of state ``state`` is (one without ``trainer``): the one whose own keys it
    holds, else the reader's own when it has an earlier kind (a state emptied of them), else Composer's."""
    if any(key in state for key in _LIGHTNING_KEYS):
        return 'Lightning SamplerSync'
    if any(key in state for key in _COMPOSER_KEYS):
        return 'Composer SamplerSync'
    return reader if reader in ('Lightning SamplerSync', 'Composer SamplerSync') else 'Composer SamplerSync'


def order_state(*, trainer: str, data_seed: int | None, signatures: list[dict[str, Any]] | None, replication: int,
                layout: Layout, fingerprint: Fingerprint | None, place: tuple[int, int, bool] | None,
                rng: list[Any] | None, rng_batch: int | None, epoch_seeds: dict[str, Any] | None,
                digests: list[str | None] | None, samples: int | None = None) -> dict[str, Any]:
    """The state every adapter saves, in the current version.

    ``place`` is ``(epoch, batches trained in it, whether it had ended)``, or None before
    any fit, and ``samples`` the distinct samples of that epoch trained across the
    data-parallel ranks; ``rng`` and ``digests`` hold one entry for every rank, in rank
    order; ``rng_batch`` is the trainer's batch count the RNG states belong to, where it
    has one.
    """
    if trainer not in TRAINERS:
        raise ValueError(f'trainer must be one of {", ".join(TRAINERS)}, got {trainer!r}')
    epoch, batches, done = place if place is not None else (None, None, None)
    return write_state(ORDER_STATE.current, {
        'data_seed': data_seed,
        'order_signatures': _entry(signatures),
        'replication': replication,
        'global_batch': layout.global_batch,
        'data_parallel_ranks': layout.data_parallel_ranks,
        'epoch_seeds': _entry(epoch_seeds),
        'rng': _entry(rng),
        'rng_batch': rng_batch,
        'data_fingerprint': fingerprint_entry(fingerprint),
        'trainer': trainer,
        'epoch': epoch,
        'batches': batches,
        'epoch_done': done,
        'samples': samples if place is not None else None,
        'batch_digests': _entry(digests),
    })


def _entry(value: Any) -> Any:
    """A list or mapping as one entry of a sharded checkpoint: a tuple (a mapping's items); None stays None.

    Example:
        >>> _entry([{'sampler': 'A'}]), _entry({'epoch': 1}), _entry(None)
        (({'sampler': 'A'},), (('epoch', 1),), None)
    """
    if value is None:
        return None
    return tuple(value.items()) if isinstance(value, dict) else tuple(value)


@dataclasses.dataclass(frozen=True)
class LoadedOrder:
    """What a loaded checkpoint says about the data order: built and checked by :meth:`read` only.

    Example:
        >>> LoadedOrder.read({'version': 3, 'data_seed': 11, 'replication': 2, 'global_batch': 16},
        ...                  reader='Composer SamplerSync').layout
        Layout(global_batch=16, data_parallel_ranks=None)
    """

    data_seed: int | None
    signatures: list[dict[str, Any]] | None
    replication: int
    layout: Layout  # the global batch and data-parallel ranks it trained with (None: not recorded)
    epoch_seeds: dict[str, Any] | None  # an epoch in flight that kept its samplers' own seeds (adoption)
    fingerprint: Fingerprint | None = None  # the train dataset's (None: written before any fit, or before it existed)
    fingerprint_required: bool = False  # whether the state's version records a fingerprint at every fit
    fingerprint_rules_older: bool = False  # whether its fingerprint was computed by an earlier release's rules
    trainer: str = 'composer'  # the adapter that wrote it
    place: tuple[int, int, bool] | None = None  # (epoch, batches trained in it, whether it had ended)
    samples: int | None = None  # the distinct samples of that epoch trained across the data-parallel ranks
    rng: list[Any] | None = None  # every rank's RNG state
    rng_batch: int | None = None  # the trainer's batch count the RNG states belong to (Composer's)
    digests: list[str | None] | None = None  # every rank's digest of its trained index lists

    @property
    def writer(self) -> str:
        """The adapter that wrote the state, as messages name it."""
        return TRAINERS[self.trainer]

    @classmethod
    def read(cls, state: Any, reader: str) -> LoadedOrder:
        """Read a state of any version an adapter wrote; ``reader`` names the adapter reading it (a value of
        :data:`TRAINERS`).

        Raises:
            DataOrderError: a version this release cannot read, a key the state's version always holds missing,
                or an earlier state of the other trainer's kind (named as such).
            TypeError, ValueError: a value of the wrong type or range, naming the key.
        """
        if not isinstance(state, dict):
            raise TypeError(f'{reader}.load_state_dict expects a dict, got {state!r:.100} ({type(state).__name__})')
        version = ORDER_STATE.check(reader, state.get(VERSION, ORDER_STATE.missing_version), error=DataOrderError)
        if 'trainer' in state or version == ORDER_STATE.current:
            return cls._read_current(state, reader)
        kind = _earlier_kind(state, reader)
        if kind != reader:
            raise DataOrderError(f'this is a {kind} state, not a {reader} state')
        if kind == 'Lightning SamplerSync':
            return cls._read_lightning(state)
        payload = _upgrade(version, read_state(state, 'Composer SamplerSync', _COMPOSER_BEFORE, error=DataOrderError))
        loaded = cls._common(payload, 'Composer SamplerSync state', fingerprint_since=5 if version >= 5 else None)
        rng = payload.get('rng')
        if isinstance(rng, tuple):  # version 4
            rng = list(rng)
        if rng is not None and not (isinstance(rng, list) and all(isinstance(item, dict) for item in rng)):
            raise TypeError(f'SamplerSync state rng must be a list of dicts (one per rank) or None, got {rng!r:.100}')
        batch = payload.get('rng_batch')
        return dataclasses.replace(loaded, fingerprint_rules_older=True, rng=rng,
                                   rng_batch=None if batch is None else valid_int('SamplerSync state rng_batch', batch))

    @classmethod
    def _read_current(cls, state: dict[str, Any], reader: str) -> LoadedOrder:
        payload = read_state(state, reader, ORDER_STATE, error=DataOrderError)
        version = int(state[VERSION])
        if version < ORDER_STATE.current:
            raise DataOrderError(f'{reader} state has version {version} and a trainer, which only version '
                                 f'{ORDER_STATE.current} states hold: it was edited')
        missing = [key for key in _KEYS if key not in payload]
        if missing:
            raise DataOrderError(f'{reader} state (version {version}) has no {", ".join(missing)}, which every state '
                                 'of its version holds: it was edited or comes from elsewhere. Resume from a '
                                 'checkpoint this release wrote, unedited')
        trainer = payload['trainer']
        if trainer not in TRAINERS:
            raise DataOrderError(f'{reader} state names the trainer {trainer!r:.50}; this release knows '
                                 f'{", ".join(TRAINERS)}')
        loaded = cls._common(payload, 'SamplerSync state', fingerprint_since=ORDER_STATE.current)
        place = None
        if payload['epoch'] is not None or payload['batches'] is not None or payload['epoch_done'] is not None:
            place = (valid_int('SamplerSync state epoch', payload['epoch'], minimum=0),
                     valid_int('SamplerSync state batches', payload['batches'], minimum=0),
                     valid_bool('SamplerSync state epoch_done', payload['epoch_done']))
        batch, samples = payload['rng_batch'], payload['samples']
        return dataclasses.replace(loaded, trainer=trainer, place=place, rng=_checked_rng(payload['rng']),
                                   samples=None if samples is None else valid_int('SamplerSync state samples', samples),
                                   rng_batch=None if batch is None else valid_int('SamplerSync state rng_batch', batch),
                                   digests=_checked_digests(payload['batch_digests']))

    @classmethod
    def _read_lightning(cls, state: dict[str, Any]) -> LoadedOrder:
        payload = read_state(state, 'Lightning SamplerSync', _LIGHTNING_BEFORE, error=DataOrderError)
        version = int(state[VERSION])
        expected = ('data_seed', 'order_signatures', 'global_batch', 'data_parallel_ranks', *_LIGHTNING_KEYS, 'rng',
                    *(('data_fingerprint',) if version >= 2 else ()))
        missing = [key for key in expected if key not in payload]
        if missing:
            raise DataOrderError(f'Lightning SamplerSync state (version {version}) has no {", ".join(missing)}, '
                                 'which every state of its version holds: it was edited or comes from elsewhere. '
                                 "Resume from a checkpoint SamplerSync wrote, or from one saved at an epoch's end "
                                 'without it')
        loaded = cls._common(payload, 'Lightning SamplerSync state', fingerprint_since=2 if version >= 2 else None)
        place = (valid_int('SamplerSync state epoch', payload['epoch'], minimum=0),
                 valid_int('SamplerSync state batches', payload['batches'], minimum=0),
                 valid_bool('SamplerSync state epoch_done', payload['epoch_done']))
        return dataclasses.replace(loaded, trainer='lightning', fingerprint_rules_older=True, place=place,
                                   rng=_checked_rng(payload['rng']))

    @classmethod
    def _common(cls, state: dict[str, Any], name: str, fingerprint_since: int | None) -> LoadedOrder:
        """The keys every kind of state shares, checked; ``fingerprint_since``: the first version of the state's
        kind that records the fingerprint, when the state is of that version or newer (its ``data_fingerprint`` key
        must then be there), else None."""
        if fingerprint_since is not None and 'data_fingerprint' not in state:
            raise DataOrderError(f'{name} has no data_fingerprint, which every state of version '
                                 f'{fingerprint_since} or newer holds: the state was edited or comes from elsewhere. '
                                 'Resume from a checkpoint this release wrote')
        seed = state.get('data_seed')
        if seed is not None:
            seed = valid_int('SamplerSync state data_seed', seed, 0, MAX_DATA_SEED)
        signatures = state.get('order_signatures')
        if isinstance(signatures, tuple):  # version 4 and later
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
        if isinstance(epoch_seeds, tuple):  # version 4 and later: its (key, value) pairs
            epoch_seeds = _pairs(epoch_seeds)
        if epoch_seeds is not None and not (isinstance(epoch_seeds, dict) and 'epoch' in epoch_seeds):
            raise TypeError(f'SamplerSync state epoch_seeds must be a dict with an epoch or None, got '
                            f'{epoch_seeds!r:.200}')
        fingerprint = read_fingerprint(state.get('data_fingerprint'), 'SamplerSync state data_fingerprint')
        return cls(seed, signatures, replication, Layout(global_batch, ranks), epoch_seeds, fingerprint,
                   fingerprint_since is not None)

    def check_graph(self, current: list[dict[str, Any]], described: list[str] | None = None) -> None:
        """Refuse a graph whose order signatures differ from the checkpoint's: the one resume check.

        ``described`` names the current nodes that have those signatures, in the same order, as the user wrote them
        (:func:`~composer_sampling._graph.walk.describe`); without it the signatures name them.
        """
        saved = self.signatures
        if not saved:
            return
        if len(saved) != len(current):
            found = ', '.join(described) if described else _samplers_text(current)
            raise DataOrderError(
                f'SamplerSync: the checkpoint was written with {_samplers_text(saved)}, the train dataloader now has '
                f'{found}; resuming would skip or repeat samples. Resume with the same sampler graph',
            )
        for position, (before, now) in enumerate(zip(saved, current, strict=True)):
            if before.get('sampler') != now.get('sampler'):
                named = described[position] if described else now.get('sampler')
                raise DataOrderError(
                    f'SamplerSync: the checkpoint was written with the sampler {before.get("sampler")}, the train '
                    f'dataloader now has {named}; resuming would skip or repeat samples. Resume with '
                    f'{before.get("sampler")}',
                )
            difference = signature_difference(before, now)
            if difference:
                key, was, is_now = difference
                raise DataOrderError(
                    f'SamplerSync: the checkpoint was written with {before.get("sampler")} {key}={was!r}, the '
                    f'train dataloader now has {key}={is_now!r}; resuming would skip or repeat samples. Resume '
                    'with the same dataset and sampler settings',
                )


def _samplers_text(signatures: list[dict[str, Any]]) -> str:
    """Order signatures in words.

    Example:
        >>> _samplers_text([{'sampler': 'DistributedSampler', 'dataset_len': 8, 'shuffle': True}])
        'the sampler DistributedSampler(dataset_len=8, shuffle=True)'
        >>> _samplers_text([])
        'no sampler whose order a checkpoint records (a loader of one process, with no distributed sampler)'
    """
    if not signatures:
        return 'no sampler whose order a checkpoint records (a loader of one process, with no distributed sampler)'
    named = [f"{item.get('sampler')}({', '.join(f'{key}={value!r}' for key, value in item.items() if key != 'sampler')}"
             ')' for item in signatures]
    return ('the sampler ' if len(named) == 1 else 'the samplers ') + ', '.join(named)


def _upgrade(version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A Composer version 1 or 2 payload in version 3's meaning: before 3, 'global_batch' counted every rank's
    samples."""
    if version < 3 and payload.get('global_batch') is not None:
        replication = valid_int('SamplerSync state replication', payload.get('replication', 1), minimum=1)
        payload['global_batch'] = valid_int('SamplerSync state global_batch', payload['global_batch'], minimum=1) \
            // replication
    return payload


def _checked_rng(rng: Any) -> list[Any] | None:
    """Every rank's RNG state, each checked restorable before the fit starts (the refusal names the rank)."""
    if rng is None:
        return None
    if not isinstance(rng, (list, tuple)) or not all(isinstance(item, dict) for item in rng):
        raise TypeError(f'SamplerSync state rng must be a list of dicts (one per rank) or None, got {rng!r:.100}')
    for rank, entry in enumerate(rng):
        try:
            rng_state.check(entry, f'SamplerSync state rng[{rank}], the RNG state of rank {rank},')
        except ValueError as error:
            raise DataOrderError(str(error)) from None
    return list(rng)


def _checked_digests(digests: Any) -> list[str | None] | None:
    if digests is None:
        return None
    if not isinstance(digests, (list, tuple)) or not all(
            item is None or (isinstance(item, str) and len(item) == 32) for item in digests):
        raise TypeError(f'SamplerSync state batch_digests must be None or a list of 32-digit digests (or None), one '
                        f'per rank, got {digests!r:.100}')
    return list(digests)


def _pairs(value: tuple[Any, ...]) -> dict[str, Any] | tuple[Any, ...]:
    """A mapping back from its (key, value) pairs; anything else as it is, for the caller's type check."""
    if all(isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in value):
        return dict(value)
    return value
