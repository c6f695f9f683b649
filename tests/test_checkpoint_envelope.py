"""One checkpoint envelope: its reader's version policy and errors, and the flat states of every kind still load.

The flat (pre-envelope) states below are built by hand as the code of commit c8b0497
wrote them: samplers ``{'version': 1, 'order_signature', 'epoch', 'sample_in_epoch',
'seed'}`` (``samplers/state.py``), wrappers ``{'version': 1, 'states': [...]}``
(``samplers/delegation.py``), ``SamplerSync`` versions 1 to 3
(``callbacks/sampler_sync.py``) and ``SampleLedger`` version 1, or without a version
(``callbacks/sample_ledger.py``).
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
from composer_sampling.callbacks.sampler_sync import DataOrderError
from composer_sampling.checkpoint_envelope import VersionPolicy, check_version, payload_of, read_state, write_state
from composer_sampling.ledger_format import MAGIC, LedgerError, read_ledger
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter

POLICY = VersionPolicy(current=3, oldest=1, flat=(1, 2), flat_default=1)


# ---------------------------------------------------------------------------------------------------------------
# The envelope and its policy


def test_a_state_round_trips_through_the_envelope() -> None:
    state = write_state('Mine', 3, {'step': 7})
    assert state == {'kind': 'Mine', 'version': 3, 'payload': {'step': 7}}
    assert read_state(state, 'Mine', POLICY) == {'step': 7}


def test_flat_states_are_read_as_their_versions() -> None:
    assert read_state({'version': 2, 'step': 4}, 'Mine', POLICY) == {'step': 4}
    assert read_state({'step': 4}, 'Mine', POLICY) == {'step': 4}, 'flat_default: a flat state without a version'
    with pytest.raises(ValueError, match=re.escape("Mine state is missing ['version']; it holds ['step']")):
        read_state({'step': 4}, 'Mine', VersionPolicy(current=2, flat=(1,)))
    with pytest.raises(ValueError, match='Mine state has version 3 without the envelope'):
        read_state({'version': 3, 'step': 4}, 'Mine', POLICY)


def test_older_versions_are_upgraded_and_the_current_one_is_not() -> None:
    seen = []

    def upgrade(version: int, payload: dict[str, Any]) -> dict[str, Any]:
        seen.append(version)
        return {**payload, 'step': payload['step'] * 10}

    policy = VersionPolicy(current=3, flat=(1, 2), flat_default=1, upgrade=upgrade)
    assert read_state({'version': 1, 'step': 1}, 'Mine', policy) == {'step': 10}
    assert read_state(write_state('Mine', 2, {'step': 2}), 'Mine', policy) == {'step': 20}
    assert read_state(write_state('Mine', 3, {'step': 3}), 'Mine', policy) == {'step': 3}
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
    for state in (write_state('Mine', version, {}), {'version': version}):
        with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
            read_state(state, 'Mine', POLICY)


def test_a_state_of_another_kind_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r'^this is a Theirs state, not a Mine state$'):
        read_state(write_state('Theirs', 3, {}), 'Mine', POLICY)


def test_broken_envelopes_are_refused() -> None:
    with pytest.raises(TypeError, match=r'^Mine\.load_state_dict expects a dict, got None \(NoneType\)$'):
        read_state(None, 'Mine', POLICY)
    with pytest.raises(ValueError, match=re.escape("Mine state is missing ['version', 'payload']")):
        read_state({'kind': 'Mine'}, 'Mine', POLICY)
    with pytest.raises(TypeError, match=r"Mine state payload must be a dict, got \[1\]"):
        read_state({'kind': 'Mine', 'version': 3, 'payload': [1]}, 'Mine', POLICY)


def test_the_error_class_is_the_callers() -> None:
    with pytest.raises(DataOrderError, match='not a SamplerSync state'):
        read_state(write_state('SampleLedger', 2, {}), 'SamplerSync', POLICY, error=DataOrderError)


def test_check_version_names_the_subject_and_range() -> None:
    assert check_version('x', 3, 3, 3) == 3
    with pytest.raises(LedgerError, match=r'^f has format 1; this version of composer-sampling reads version 3!$'):
        check_version('f', 1, 3, 3, noun='format', detail='!', error=LedgerError)


def test_payload_of_peeks_without_checks() -> None:
    assert payload_of(write_state('SamplerSync', 4, {'data_seed': 3}), 'SamplerSync') == {'data_seed': 3}
    assert payload_of({'version': 3, 'data_seed': 3}, 'SamplerSync') == {'version': 3, 'data_seed': 3}
    assert payload_of(write_state('SampleLedger', 2, {}), 'SamplerSync') is None
    assert payload_of(None, 'SamplerSync') is None


# ---------------------------------------------------------------------------------------------------------------
# Samplers: version 2 in the envelope, version 1 flat


SAMPLERS = {
    'resumable': lambda: ResumableDistributedSampler(40, 2, 1, seed=5),
    'sub-epoch': lambda: SubEpochDistributedSampler(40, 2, 2, 1, seed=5),
    'mixture': lambda: MixtureDistributedSampler([24, 16], 2, 2, 1, seed=5),
}


def flat_v1(sampler: Any, epoch: int, position: int, seed: int) -> dict[str, Any]:
    """What ``state_dict()`` wrote at c8b0497."""
    return {'version': 1, 'order_signature': sampler.order_signature(), 'epoch': epoch, 'sample_in_epoch': position,
            'seed': seed}


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_a_flat_version_1_sampler_state_resumes_as_the_envelope_does(kind: str) -> None:
    reference = SAMPLERS[kind]()
    reference.set_epoch(3)
    whole = list(reference)
    old, new = SAMPLERS[kind](), SAMPLERS[kind]()
    old.load_state_dict(flat_v1(reference, 3, 4, 5))
    state = reference.state_dict()
    reference.set_sample_in_epoch(4)
    new.load_state_dict(reference.state_dict())
    assert state['kind'] == type(reference).__name__ and state['version'] == 2
    assert list(old) == list(new) == whole[2:]


@pytest.mark.parametrize('layout', ['envelope', 'flat'])
def test_a_state_of_another_sampler_class_is_refused_naming_both(layout: str) -> None:
    resumable = ResumableDistributedSampler(40, 2, 1)
    state = resumable.state_dict() if layout == 'envelope' else flat_v1(resumable, 0, 0, 0)
    with pytest.raises(ValueError, match=r'^this is a ResumableDistributedSampler state, not a '
                                         r'SubEpochDistributedSampler state$'):
        SubEpochDistributedSampler(40, 2, 2, 1).load_state_dict(state)


def test_a_bool_is_not_a_sampler_state_version() -> None:
    sampler = ResumableDistributedSampler(40, 2, 1)
    for state in ({**sampler.state_dict(), 'version': True}, {**flat_v1(sampler, 0, 0, 0), 'version': True}):
        with pytest.raises(ValueError, match='ResumableDistributedSampler state has version True'):
            sampler.load_state_dict(state)


# ---------------------------------------------------------------------------------------------------------------
# Wrappers: version 2 in the envelope, version 1 flat


def _nested() -> NestedBatchSampler:
    return NestedBatchSampler(BatchSampler(ResumableDistributedSampler(40, 2, 1, seed=5), 2, False), 2)


def _adapter() -> DistributedBatchAdapter:
    return DistributedBatchAdapter(BatchSampler(ResumableDistributedSampler(40, 2, 1, seed=5), 2, False))


@pytest.mark.parametrize(('make', 'kind', 'skip'),
                         [(_nested, 'NestedBatchSampler', 1), (_adapter, 'DistributedBatchAdapter', 2)])
def test_wrapper_states_old_and_new_resume_alike(make: Any, kind: str, skip: int) -> None:
    """Position 8 of 2 ranks: 4 indices of this rank, one batch of two batches of 2, or two batches of 2."""
    reference = make()
    inner = ResumableDistributedSampler(40, 2, 1, seed=5)
    whole = list(reference)
    state = reference.state_dict()
    assert (state['kind'], state['version'], len(state['payload']['states'])) == (kind, 2, 1)
    old, new = make(), make()
    old.load_state_dict({'version': 1, 'states': [flat_v1(inner, 0, 8, 5)]})
    nested_state = {**state, 'payload': {'states': [write_state('ResumableDistributedSampler', 2, {
        'order_signature': inner.order_signature(), 'epoch': 0, 'sample_in_epoch': 8, 'seed': 5})]}}
    new.load_state_dict(nested_state)
    assert list(old) == list(new) == whole[skip:]
    with pytest.raises(ValueError, match=f'{kind} state has version 3; this version of composer-sampling reads '
                                         'versions 1 to 2'):
        make().load_state_dict({**state, 'version': 3})
    with pytest.raises(TypeError, match=f'{kind} state must hold a list "states"'):
        make().load_state_dict({'version': 1, 'states': None})


# ---------------------------------------------------------------------------------------------------------------
# SamplerSync: versions 1 to 3 flat, 4 in the envelope


RNG = [{'python': (3, (1, 2), None)}]
SYNC_FLAT = {
    1: {'version': 1, 'data_seed': 11, 'order_signatures': [{'sampler': 'DistributedSampler', 'dataset_len': 8,
                                                             'shuffle': True}]},
    2: {'version': 2, 'data_seed': 11, 'order_signatures': None, 'replication': 2, 'global_batch': 32},
    3: {'version': 3, 'data_seed': 11, 'order_signatures': None, 'replication': 2, 'global_batch': 16,
        'data_parallel_ranks': 4, 'epoch_seeds': {'epoch': 1, 'samplers': [3]}, 'rng': RNG, 'rng_batch': 6},
}


def _loaded(sync: SamplerSync) -> tuple[Any, ...]:
    return (sync._checkpoint_seed, sync._checkpoint_replication, sync._checkpoint_layout.global_batch,
            sync._checkpoint_layout.data_parallel_ranks, sync._epoch_seeds, sync._rng._loaded_batch)


@pytest.mark.parametrize(
    ('version', 'expected'),
    [(1, (11, 1, None, None, None, None)), (2, (11, 2, 16, None, None, None)),
     (3, (11, 2, 16, 4, {'epoch': 1, 'samplers': [3]}, 6))],
)
def test_every_flat_sampler_sync_version_loads(version: int, expected: tuple[Any, ...]) -> None:
    sync = SamplerSync()
    sync.load_state_dict(SYNC_FLAT[version])
    assert _loaded(sync) == expected, 'version 2 counted a replication group R times: 32 // 2 distinct'
    if version == 1:
        assert sync._checkpoint_signatures == SYNC_FLAT[1]['order_signatures']


def test_sampler_sync_writes_the_envelope_and_reads_it_back() -> None:
    sync = SamplerSync(data_seed=9)
    state = sync.state_dict()
    assert (state['kind'], state['version']) == ('SamplerSync', 4)
    assert set(state['payload']) == {'data_seed', 'order_signatures', 'replication', 'global_batch',
                                     'data_parallel_ranks', 'epoch_seeds', 'rng', 'rng_batch'}
    version_3 = {'version': 3, **{key: SYNC_FLAT[3][key] for key in SYNC_FLAT[3] if key != 'version'}}
    envelope, flat = SamplerSync(), SamplerSync()
    envelope.load_state_dict(write_state('SamplerSync', 4, {k: v for k, v in version_3.items() if k != 'version'}))
    flat.load_state_dict(version_3)
    assert _loaded(envelope) == _loaded(flat)
    with pytest.raises(DataOrderError, match=r'^this is a SampleLedger state, not a SamplerSync state$'):
        SamplerSync().load_state_dict(SampleLedger().state_dict())
    with pytest.raises(DataOrderError, match='SamplerSync state has version 4 without the envelope'):
        SamplerSync().load_state_dict({'version': 4})


# ---------------------------------------------------------------------------------------------------------------
# SampleLedger: version 1 flat (and older, without a version), 2 in the envelope


@pytest.mark.parametrize('state', [{'lineage': 'abc', 'attempt': 'f00d', 'batch': 30},
                                   {'version': 1, 'lineage': 'abc', 'attempt': 'f00d', 'batch': 30},
                                   write_state('SampleLedger', 2, {'lineage': 'abc', 'attempt': 'f00d', 'batch': 30})],
                         ids=['unversioned', 'v1', 'v2'])
def test_every_sample_ledger_state_loads(state: dict[str, Any]) -> None:
    ledger = SampleLedger()
    ledger.load_state_dict(state)
    assert ledger.state_dict() == write_state('SampleLedger', 2, {'lineage': 'abc', 'attempt': 'f00d', 'batch': 30})


def test_sample_ledger_refusals() -> None:
    with pytest.raises(TypeError, match=r'^SampleLedger\.load_state_dict expects a dict, got None'):
        SampleLedger().load_state_dict(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r'^this is a SamplerSync state, not a SampleLedger state$'):
        SampleLedger().load_state_dict(SamplerSync().state_dict())
    with pytest.raises(ValueError, match=re.escape('SampleLedger state has version 3; this version of '
                                                   'composer-sampling reads versions 1 to 2. Upgrade')):
        SampleLedger().load_state_dict(write_state('SampleLedger', 3, {}))


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
