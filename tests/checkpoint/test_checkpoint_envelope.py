"""One checkpoint envelope: every state is ``{'version': N, **payload}``, read by one reader with a version policy.

The layout is the one every release wrote (commit c8b0497 and before): samplers
``{'version': 1, 'order_signature', 'epoch', 'sample_in_epoch', 'seed'}``, wrappers
``{'version': 1, 'states': [...]}``, ``SamplerSync`` versions 1 to 4 and
``SampleLedger`` version 1 (or, oldest, without a version). The states written by
that commit itself are fixtures (tests/test_state_fixtures.py); here the policy,
its errors and the legacy versions are checked on states built by hand.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import BatchSampler

from composer_sampling import (
    MixtureDistributedSampler,
    NestedBatchSampler,
    ResumableDistributedSampler,
    SampleLedger,
    SamplerSync,
    SubEpochDistributedSampler,
)
from composer_sampling._checkpoint.envelope import VersionPolicy, payload_of, read_state, valid_version, write_state
from composer_sampling._resume import rng_state
from composer_sampling.callbacks.sampler_sync import DataOrderError
from composer_sampling.ledger_format import MAGIC, LedgerError, read_ledger
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter

POLICY = VersionPolicy(current=3, missing_version=1, kind_of=lambda payload: payload.get('writer'))


# ---------------------------------------------------------------------------------------------------------------
# The envelope and its policy


def test_a_state_round_trips_through_the_envelope() -> None:
    state = write_state(3, {'step': 7})
    assert state == {'version': 3, 'step': 7} and list(state) == ['version', 'step']
    assert read_state(state, 'Mine', POLICY) == {'step': 7}
    with pytest.raises(ValueError, match="cannot hold the key 'version'"):
        write_state(3, {'version': 2})


def test_a_state_without_a_version_is_read_as_the_policy_says() -> None:
    assert read_state({'step': 4}, 'Mine', POLICY) == {'step': 4}
    with pytest.raises(ValueError, match=re.escape("Mine state is missing ['version']; it holds ['step']")):
        read_state({'step': 4}, 'Mine', VersionPolicy(current=2))


def test_older_versions_are_upgraded_and_the_current_one_is_not() -> None:
    seen = []

    def upgrade(version: int, payload: dict[str, Any]) -> dict[str, Any]:
        seen.append(version)
        return {**payload, 'step': payload['step'] * 10}

    policy = VersionPolicy(current=3, missing_version=1, upgrade=upgrade)
    assert read_state({'step': 1}, 'Mine', policy) == {'step': 10}
    assert read_state(write_state(2, {'step': 2}), 'Mine', policy) == {'step': 20}
    assert read_state(write_state(3, {'step': 3}), 'Mine', policy) == {'step': 3}
    assert seen == [1, 2]


@pytest.mark.parametrize(
    ('version', 'message'),
    [
        (4, 'Mine state has version 4; this version of composer-sampling reads versions 1 to 3. Upgrade '
            'composer-sampling to resume this checkpoint'),
        (0, 'Mine state has version 0; this version of composer-sampling reads versions 1 to 3'),
        (True, 'Mine state has version True; this version of composer-sampling reads versions 1 to 3'),
        ('2', "Mine state has version '2'; this version of composer-sampling reads versions 1 to 3"),
        (2.0, 'Mine state has version 2.0; this version of composer-sampling reads versions 1 to 3'),
    ],
)
def test_versions_outside_the_policy_are_refused_in_one_format(version: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
        read_state({'version': version}, 'Mine', POLICY)


def test_a_state_that_names_another_kind_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r'^this is a Theirs state, not a Mine state$'):
        read_state(write_state(3, {'writer': 'Theirs'}), 'Mine', POLICY)
    assert read_state(write_state(3, {'writer': 'Mine'}), 'Mine', POLICY) == {'writer': 'Mine'}


def test_a_state_that_is_not_a_dict_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r'^Mine\.load_state_dict expects a dict, got None \(NoneType\)$'):
        read_state(None, 'Mine', POLICY)


def test_the_error_class_is_the_callers() -> None:
    with pytest.raises(DataOrderError, match='SamplerSync state has version 9'):
        read_state({'version': 9}, 'SamplerSync', POLICY, error=DataOrderError)


def test_valid_version_names_the_subject_and_range() -> None:
    assert valid_version('x', 3, 3, 3) == 3
    with pytest.raises(LedgerError, match=r'^f has format 1; this version of composer-sampling reads version 3!$'):
        valid_version('f', 1, 3, 3, noun='format', detail='!', error=LedgerError)


def test_payload_of_peeks_without_checks() -> None:
    assert payload_of({'version': 3, 'data_seed': 3}) == {'data_seed': 3}
    assert payload_of({'data_seed': 3}) == {'data_seed': 3}
    assert payload_of(None) is None


# ---------------------------------------------------------------------------------------------------------------
# Samplers: version 1, whose order signature names the class


SAMPLERS = {
    'resumable': lambda: ResumableDistributedSampler(40, 2, 1, seed=5),
    'sub-epoch': lambda: SubEpochDistributedSampler(40, 2, 2, 1, seed=5),
    'mixture': lambda: MixtureDistributedSampler([24, 16], 2, 2, 1, seed=5),
}


def written_at_c8b0497(sampler: Any, epoch: int, position: int, seed: int) -> dict[str, Any]:
    """What ``state_dict()`` wrote at c8b0497, key for key."""
    return {'version': 1, 'order_signature': sampler.order_signature(), 'epoch': epoch, 'sample_in_epoch': position,
            'seed': seed}


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_a_sampler_writes_what_c8b0497_wrote_and_resumes_from_it(kind: str) -> None:
    reference = SAMPLERS[kind]()
    reference.set_epoch(3)
    whole = list(reference)
    reference.set_sample_in_epoch(4)
    state = reference.state_dict()
    assert state == written_at_c8b0497(reference, 3, 4, 5) and next(iter(state)) == 'version'
    resumed = SAMPLERS[kind]()
    resumed.load_state_dict(written_at_c8b0497(reference, 3, 4, 5))
    assert list(resumed) == whole[2:]


def test_a_state_of_another_sampler_class_is_refused_naming_both() -> None:
    state = ResumableDistributedSampler(40, 2, 1).state_dict()
    with pytest.raises(ValueError, match=r'^this is a ResumableDistributedSampler state, not a '
                                         r'SubEpochDistributedSampler state$'):
        SubEpochDistributedSampler(40, 2, 2, 1).load_state_dict(state)


def test_a_bool_is_not_a_sampler_state_version() -> None:
    sampler = ResumableDistributedSampler(40, 2, 1)
    with pytest.raises(ValueError, match='ResumableDistributedSampler state has version True'):
        sampler.load_state_dict({**sampler.state_dict(), 'version': True})


# ---------------------------------------------------------------------------------------------------------------
# Wrappers: version 1, the states of the order-deciding nodes below


def _nested() -> NestedBatchSampler:
    return NestedBatchSampler(BatchSampler(ResumableDistributedSampler(40, 2, 1, seed=5), 2, False), 2)


def _adapter() -> DistributedBatchAdapter:
    return DistributedBatchAdapter(BatchSampler(ResumableDistributedSampler(40, 2, 1, seed=5), 2, False))


@pytest.mark.parametrize(('make', 'kind', 'skip'),
                         [(_nested, 'NestedBatchSampler', 1), (_adapter, 'DistributedBatchAdapter', 2)])
def test_wrapper_states_resume_and_refuse_in_the_one_format(make: Any, kind: str, skip: int) -> None:
    """Position 8 of 2 ranks: 4 indices of this rank, one batch of two batches of 2, or two batches of 2."""
    reference = make()
    inner = ResumableDistributedSampler(40, 2, 1, seed=5)
    whole = list(reference)
    assert reference.state_dict() == {'version': 1, 'states': [inner.state_dict() | {'sample_in_epoch': 40}]}
    resumed = make()
    resumed.load_state_dict({'version': 1, 'states': [written_at_c8b0497(inner, 0, 8, 5)]})
    assert list(resumed) == whole[skip:]
    with pytest.raises(ValueError, match=f'{kind} state has version 3; this version of composer-sampling reads '
                                         'version 1'):
        make().load_state_dict({'version': 3, 'states': []})
    with pytest.raises(TypeError, match=f'{kind} state must hold a list "states"'):
        make().load_state_dict({'version': 1, 'states': None})


# ---------------------------------------------------------------------------------------------------------------
# SamplerSync: versions 1 to 5


RNG = [{'python': (3, (1, 2), None)}]
SYNC_FLAT = {
    1: {'version': 1, 'data_seed': 11, 'order_signatures': [{'sampler': 'DistributedSampler', 'dataset_len': 8,
                                                             'shuffle': True}]},
    2: {'version': 2, 'data_seed': 11, 'order_signatures': None, 'replication': 2, 'global_batch': 32},
    3: {'version': 3, 'data_seed': 11, 'order_signatures': None, 'replication': 2, 'global_batch': 16,
        'data_parallel_ranks': 4, 'epoch_seeds': {'epoch': 1, 'samplers': [3]}, 'rng': RNG, 'rng_batch': 6},
    4: {'version': 4, 'data_seed': 11, 'order_signatures': ({'sampler': 'DistributedSampler', 'dataset_len': 8,
                                                             'shuffle': True},),
        'replication': 2, 'global_batch': 16, 'data_parallel_ranks': 4,
        'epoch_seeds': (('epoch', 1), ('samplers', [3])), 'rng': tuple(RNG), 'rng_batch': 6},
}
SYNC_FLAT[5] = {**SYNC_FLAT[4], 'version': 5, 'data_fingerprint': ('ab' * 16, 'TensorDataset of 1 tensor', True)}
#: Version 6 checks every rank's RNG state when the state is read: a real one.
REAL_RNG = rng_state.capture()
SYNC_FLAT[6] = {**SYNC_FLAT[4], 'version': 6, 'rng': (REAL_RNG,),
                'data_fingerprint': ('ab' * 16, 'TensorDataset of 1 tensor', True, 8),
                'trainer': 'composer', 'epoch': 1, 'batches': 3, 'epoch_done': False, 'samples': 48,
                'batch_digests': None}


def _loaded(sync: SamplerSync) -> tuple[Any, ...]:
    loaded = sync._loaded
    assert loaded is not None
    return (loaded.data_seed, loaded.replication, loaded.layout.global_batch, loaded.layout.data_parallel_ranks,
            loaded.epoch_seeds, sync._rng._loaded_batch)


@pytest.mark.parametrize(
    ('version', 'expected'),
    [(1, (11, 1, None, None, None, None)), (2, (11, 2, 16, None, None, None)),
     (3, (11, 2, 16, 4, {'epoch': 1, 'samplers': [3]}, 6)), (4, (11, 2, 16, 4, {'epoch': 1, 'samplers': [3]}, 6)),
     (5, (11, 2, 16, 4, {'epoch': 1, 'samplers': [3]}, 6)), (6, (11, 2, 16, 4, {'epoch': 1, 'samplers': [3]}, 6))],
)
def test_every_sampler_sync_version_loads(version: int, expected: tuple[Any, ...]) -> None:
    sync = SamplerSync()
    sync.load_state_dict(SYNC_FLAT[version])
    assert _loaded(sync) == expected, 'version 2 counted a replication group R times: 32 // 2 distinct'
    assert sync._loaded is not None
    fingerprint = sync._loaded.fingerprint
    assert (fingerprint is None) == (version < 5), 'versions 5 and 6 carry a fingerprint'
    if fingerprint is not None:
        assert (fingerprint.digest, fingerprint.source, fingerprint.covers_content) == \
            SYNC_FLAT[5]['data_fingerprint']
        assert fingerprint.samples == (8 if version == 6 else None), 'version 6 adds the sample count'
        assert sync._loaded.fingerprint_rules_older == (version < 6)
    if version in (1, 4, 5, 6):
        assert sync._loaded is not None and sync._loaded.signatures == list(SYNC_FLAT[version]['order_signatures'])
    if version == 6:
        assert sync._rng._loaded is not None and sync._rng._loaded[0] is REAL_RNG
    elif version >= 3:
        assert sync._rng._loaded == RNG


def test_sampler_sync_version_4_refuses_what_version_3_refused() -> None:
    with pytest.raises(TypeError, match='order_signatures must be a list of dicts or None'):
        SamplerSync().load_state_dict({**SYNC_FLAT[4], 'order_signatures': (5,)})
    with pytest.raises(TypeError, match='epoch_seeds must be a dict with an epoch or None'):
        SamplerSync().load_state_dict({**SYNC_FLAT[4], 'epoch_seeds': (('samplers', [3]),)})
    with pytest.raises(TypeError, match='rng must be a list of dicts'):
        SamplerSync().load_state_dict({**SYNC_FLAT[4], 'rng': (3,)})


def test_sampler_sync_writes_version_6_and_refuses_newer() -> None:
    state = SamplerSync(data_seed=9).state_dict()
    assert list(state) == ['version', 'data_seed', 'order_signatures', 'replication', 'global_batch',
                           'data_parallel_ranks', 'epoch_seeds', 'rng', 'rng_batch', 'data_fingerprint', 'trainer',
                           'epoch', 'batches', 'epoch_done', 'samples', 'batch_digests'] and state['version'] == 6
    with pytest.raises(DataOrderError, match=re.escape('SamplerSync state has version 7; this version of '
                                                       'composer-sampling reads versions 1 to 6. Upgrade')):
        SamplerSync().load_state_dict({'version': 7})


# ---------------------------------------------------------------------------------------------------------------
# SampleLedger: version 1 (the oldest states had no version)


@pytest.mark.parametrize('state', [{'lineage': 'abc', 'attempt': 'f00d', 'batch': 30},
                                   {'version': 1, 'lineage': 'abc', 'attempt': 'f00d', 'batch': 30}],
                         ids=['unversioned', 'v1'])
def test_every_sample_ledger_state_loads(state: dict[str, Any]) -> None:
    ledger = SampleLedger()
    ledger.load_state_dict(state)
    assert ledger.state_dict() == {'version': 1, 'lineage': 'abc', 'attempt': 'f00d', 'batch': 30}


def test_sample_ledger_refusals() -> None:
    with pytest.raises(TypeError, match=r'^SampleLedger\.load_state_dict expects a dict, got None'):
        SampleLedger().load_state_dict(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape('SampleLedger state has version 2; this version of '
                                                   'composer-sampling reads version 1. Upgrade')):
        SampleLedger().load_state_dict({'version': 2})


# ---------------------------------------------------------------------------------------------------------------
# The ledger file header: the same version check, the file bytes unchanged


def test_a_bool_ledger_format_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / 'rank0.bin'
    text = json.dumps({'version': True, 'rank': 0}).encode()
    path.write_bytes(MAGIC + struct.pack('<I', len(text)) + text)
    with pytest.raises(LedgerError, match=re.escape('rank0.bin has ledger format version True; this version of '
                                                    'composer-sampling reads versions 2 to 3 (version 1 has no '
                                                    'header checksum)')):
        read_ledger(path)


def test_a_lightning_state_given_to_the_composer_callback_is_named_as_such() -> None:
    """Its epoch and batch count would be dropped if it were read as an older Composer state."""
    lightning = {'version': 2, 'data_seed': 17, 'order_signatures': None, 'global_batch': 8, 'data_parallel_ranks': 1,
                 'epoch': 1, 'batches': 3, 'epoch_done': False, 'rng': None, 'data_fingerprint': None}
    with pytest.raises(DataOrderError, match=r'^this is a Lightning SamplerSync state, not a Composer SamplerSync '
                                             r'state$'):
        SamplerSync().load_state_dict(lightning)
