"""The Lightning SamplerSync's checkpoint state: what it writes, and the loaded state as one checked value.

Plain values only (numbers, strings, lists, tuples, dicts and CPU tensors), so that a
checkpoint that holds it loads with ``torch.load(weights_only=True)``, as Lightning
loads checkpoints. Besides the data seed, the order signatures and the layout (the
Composer callback's meaning), it holds where the fit stood when the checkpoint was
taken: the epoch, the batches trained in it, whether the epoch had ended, and every
rank's RNG state.

Example:
    >>> state = lightning_state(7, None, Layout(8, 2), Where(epoch=1, batches=3, epoch_done=False), None)
    >>> loaded = LoadedLightning.read(state)
    >>> loaded.sync.data_seed, loaded.where
    (7, Where(epoch=1, batches=3, epoch_done=False))
"""

from __future__ import annotations

import dataclasses
from typing import Any

from composer_sampling._checkpoint.envelope import VersionPolicy, read_state, write_state
from composer_sampling._fingerprint import Fingerprint
from composer_sampling._resume import rng_state
from composer_sampling._resume.data_identity import fingerprint_entry
from composer_sampling._resume.decide import Layout
from composer_sampling._resume.loaded import LoadedSync, other_trainer
from composer_sampling._validate import valid_bool, valid_int

__all__ = ['LIGHTNING_STATE', 'LoadedLightning', 'Where', 'lightning_state']

#: 3: adds 'batch_digests', every rank's digest of the index lists its epoch trained before the checkpoint, where a
#: node of the graph orders by nothing SamplerSync can set (None otherwise; see ``_resume/redraw.py``); and
#: 'data_fingerprint' holds a fourth value, the sample count, computed by the rules that read the edges of local
#: stream shards and name undeclared wrappers (a version 2 fingerprint of such data differs, and its refusal says why).
#: 2: adds 'data_fingerprint', the train dataset's fingerprint (a version 1 state has none: its resume says so).
#: 1: the first version.
LIGHTNING_STATE = VersionPolicy(current=3, kind_of=lambda payload: other_trainer(payload, 'Lightning SamplerSync'))

#: The keys every state holds, in every version; 'data_fingerprint' from version 2.
_KEYS = ('data_seed', 'order_signatures', 'global_batch', 'data_parallel_ranks', 'epoch', 'batches', 'epoch_done',
         'rng')
_FINGERPRINT_SINCE = 2
_DIGESTS_SINCE = 3


@dataclasses.dataclass(frozen=True)
class Where:
    """Where the fit stood: its epoch, the batches trained in it, and whether the epoch had ended."""

    epoch: int
    batches: int
    epoch_done: bool


def lightning_state(data_seed: int | None, signatures: list[dict[str, Any]] | None, layout: Layout, where: Where,
                    rng: list[dict[str, Any]] | None, fingerprint: Fingerprint | None = None,
                    digests: list[str | None] | None = None) -> dict[str, Any]:
    """The state the Lightning SamplerSync saves, in the current version (``rng`` and ``digests``: every rank's, in
    rank order)."""
    return write_state(LIGHTNING_STATE.current, {
        'data_seed': data_seed,
        'order_signatures': None if signatures is None else tuple(signatures),
        'global_batch': layout.global_batch,
        'data_parallel_ranks': layout.data_parallel_ranks,
        'epoch': where.epoch,
        'batches': where.batches,
        'epoch_done': where.epoch_done,
        'rng': None if rng is None else tuple(rng),
        'data_fingerprint': fingerprint_entry(fingerprint),
        'batch_digests': None if digests is None else tuple(digests),
    })


@dataclasses.dataclass(frozen=True)
class LoadedLightning:
    """A loaded state, checked: the part the Composer callback shares (:class:`LoadedSync`), where the fit stood,
    and every rank's RNG state."""

    sync: LoadedSync
    where: Where
    rng: list[dict[str, Any]] | None
    digests: list[str | None] | None = None  # every rank's digest of its trained index lists (None: not kept)

    @classmethod
    def read(cls, state: Any) -> LoadedLightning:
        """Read and check a state this callback wrote; a missing key, or a value of the wrong type or range, raises
        naming the key; every rank's RNG state is checked here, before the fit starts."""
        payload = read_state(state, 'Lightning SamplerSync', LIGHTNING_STATE)
        version = state['version']
        expected = (*_KEYS, *(('data_fingerprint',) if version >= _FINGERPRINT_SINCE else ()),
                    *(('batch_digests',) if version >= _DIGESTS_SINCE else ()))
        missing = [key for key in expected if key not in payload]
        if missing:
            raise ValueError(f'Lightning SamplerSync state (version {version}) has no {", ".join(missing)}, which '
                             'every state of its version holds: it was edited or comes from elsewhere. Resume from '
                             'a checkpoint SamplerSync wrote, or from one saved at an epoch\'s end without it')
        sync = dataclasses.replace(
            LoadedSync.from_payload(payload, _FINGERPRINT_SINCE if version >= _FINGERPRINT_SINCE else None),
            fingerprint_rules_older=version < _DIGESTS_SINCE)
        where = Where(valid_int('SamplerSync state epoch', payload['epoch'], minimum=0),
                      valid_int('SamplerSync state batches', payload['batches'], minimum=0),
                      valid_bool('SamplerSync state epoch_done', payload['epoch_done']))
        rng = payload['rng']
        if rng is not None:
            if not isinstance(rng, (list, tuple)) or not all(isinstance(item, dict) for item in rng):
                raise TypeError(f'SamplerSync state rng must be a list of dicts (one per rank) or None, got '
                                f'{rng!r:.100}')
            rng = list(rng)
            for rank, entry in enumerate(rng):
                rng_state.check(entry, f'SamplerSync state rng[{rank}], the RNG state of rank {rank},')
        digests = payload.get('batch_digests')
        if digests is not None:
            if not isinstance(digests, (list, tuple)) or not all(
                    item is None or (isinstance(item, str) and len(item) == 32) for item in digests):
                raise TypeError(f'SamplerSync state batch_digests must be None or a list of 32-digit digests (or '
                                f'None), one per rank, got {digests!r:.100}')
            digests = list(digests)
        return cls(sync, where, rng, digests)
