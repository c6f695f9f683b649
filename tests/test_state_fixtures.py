"""Checkpoints written by earlier code keep loading, and resume as that code's successor did.

Every file in ``tests/fixtures/states/`` was written by ``tests/fixtures/write_state_fixtures.py``
with the code of commit c8b0497 (sampler and wrapper states, SamplerSync state version 3,
SampleLedger state version 1, the ledger file ``tests/fixtures/ledger-v3/``), except the
Composer checkpoints holding SamplerSync state version 1 (written by commit 5af8f7d, with
SampleLedger's first state, ``{'lineage'}``) and version 2 (commit deebb79, SampleLedger's
``{'lineage', 'attempt', 'batch'}``). The expectations are what the code of c8b0497 did
with each. The tests go through public APIs only: build a sampler, ``load_state_dict``,
compare what it yields; resume a Trainer from the checkpoint and compare what it trains,
the data seed it uses and the ledger it writes. They never read the layout of a state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from composer_sampling import SampleLedger
from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import read_ledger

from support.helpers import fixture_writer

FIXTURES = Path(__file__).resolve().parent / 'fixtures'
STATES = FIXTURES / 'states'
SAMPLER_CASES = sorted(path.stem for path in (STATES / 'samplers').glob('*.json'))
SYNC_CASES = sorted(path.stem for path in STATES.glob('sampler-sync-v*.json'))





def _record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_every_kind_of_fixture_is_present() -> None:
    assert len(SAMPLER_CASES) >= 15
    written = [f'sampler-sync-v{version}-{graph}' for version in (1, 2, 3) for graph in ('batches', 'sampler')]
    assert written == SYNC_CASES


@pytest.mark.parametrize('case', SAMPLER_CASES)
def test_a_sampler_state_of_c8b0497_resumes_the_rest_of_its_pass(case: str) -> None:
    writer = fixture_writer()
    record = _record(STATES / 'samplers' / f'{case}.json')
    expected = record['expected']
    sampler = writer.build_sampler(record['build'])
    sampler.load_state_dict(record['state'])
    assert writer.restored(sampler) == expected['restored']
    assert [writer.as_plain(item) for item in sampler] == expected['rest']
    writer.set_epoch(sampler, expected['restored'][0]['epoch'] + 1)
    following = [writer.as_plain(item) for _, item in zip(range(len(expected['next_epoch'])), sampler, strict=False)]
    assert following == expected['next_epoch']


def _with_seed_zero(build: dict[str, Any]) -> dict[str, Any]:
    """``build`` with every seed argument 0 (no fixture was written with seed 0)."""
    args = {**build['args'], 'seed': 0} if 'seed' in build['args'] else dict(build['args'])
    if 'sampler' in args:
        args['sampler'] = {**args['sampler'], 'seed': 0}
    return {**build, 'args': args}


@pytest.mark.parametrize('case', SAMPLER_CASES)
def test_a_sampler_state_brings_its_seed_into_a_sampler_built_with_another(case: str) -> None:
    writer = fixture_writer()
    record = _record(STATES / 'samplers' / f'{case}.json')
    sampler = writer.build_sampler(_with_seed_zero(record['build']))
    assert all(node.seed == 0 for node in writer.ours(sampler))
    sampler.load_state_dict(record['state'])
    assert writer.restored(sampler) == record['expected']['restored']
    assert [writer.as_plain(item) for item in sampler] == record['expected']['rest']


@pytest.mark.parametrize('case', SAMPLER_CASES)
def test_a_sampler_state_taken_mid_pass_continues_where_the_writer_stopped(case: str) -> None:
    """``taken`` and the rest are one whole pass of a fresh sampler moved as the writer moved it."""
    writer = fixture_writer()
    record = _record(STATES / 'samplers' / f'{case}.json')
    sampler = writer.build_sampler(record['build'])
    writer.set_epoch(sampler, record['steps']['epoch'])
    for node in writer.ours(sampler):
        node.set_sample_in_epoch(record['steps'].get('offset', 0))
    assert [writer.as_plain(item) for item in sampler] == record['taken'] + record['expected']['rest']


@pytest.mark.parametrize('case', SYNC_CASES)
def test_a_sampler_sync_checkpoint_resumes_the_epoch_in_flight(case: str, tmp_path: Path) -> None:
    writer = fixture_writer()
    record = _record(STATES / f'{case}.json')
    expected = record['expected']['same_batch']
    with pytest.warns(UserWarning, match='the checkpoint carries no fingerprint of the train dataset'):
        resumed = writer.resume(STATES / record['checkpoint'], record['graph'], tmp_path / 'ledger')
    # the fit asked for another data seed: the checkpoint's wins
    assert resumed['data_seed'] == resumed['sampler_seeds'][0] == record['restores']['data_seed'] == writer.DATA_SEED
    assert resumed['batches'] == expected['batches']
    assert resumed['batches'] == record['written_run'][writer.CHECKPOINT_BATCH:]  # the rest of the writer's own run
    assert resumed['draws'] == expected['draws']  # the RNG where the checkpoint left it (or as c8b0497 set it)
    assert resumed['ledger'] == expected['ledger']


@pytest.mark.parametrize('case', [case for case in SYNC_CASES if case.endswith('-batches')])
def test_a_resume_with_another_global_batch_is_refused_for_every_version(case: str, tmp_path: Path) -> None:
    """A graph that decides whole batches resumes only on the saved global batch.

    Versions 2 and 3 hold it; version 1 does not, and the checkpoint's timestamp gives
    it (distinct samples trained / batches trained). c8b0497 did not refuse version 1
    (``device_batch_4`` in its fixture: it skipped samples); this code does.
    """
    writer = fixture_writer()
    record = _record(STATES / f'{case}.json')
    saved = writer.DEVICE_BATCH
    assert record['restores']['global_batch'] in (saved, None)
    resumed = writer.resume(STATES / record['checkpoint'], record['graph'], tmp_path / 'ledger', device_batch=4)
    assert resumed.get('refused') == 'DataOrderError' and f'global batch {saved}' in resumed['message']


@pytest.mark.parametrize('case', SYNC_CASES)
def test_a_sample_ledger_state_of_every_version_keeps_its_lineage(case: str) -> None:
    record = _record(STATES / f'{case}.json')
    ledger = SampleLedger()
    ledger.load_state_dict(record['sample_ledger_state'])
    assert ledger.lineage == record['expected']['same_batch']['ledger']['lineage']


def test_the_v3_ledger_file_of_c8b0497_reads_and_audits() -> None:
    expected = _record(STATES / 'ledger-file-v3.json')
    ledger = read_ledger(FIXTURES / expected['file'])
    assert {key: ledger.header[key] for key in expected['header']} == expected['header']
    assert [[r.epoch, r.batch, r.indices.tolist()] for r in ledger.records] == expected['records']
    assert ledger.torn is None
    report = audit_folder(FIXTURES / 'ledger-v3')
    assert report.dataset_len == expected['audit']['dataset_len'] and not report.violations
    assert [[e.epoch, e.trained, e.exactly_once, e.repeated, e.missing, e.status] for e in report.epochs] == \
        expected['audit']['epochs']
