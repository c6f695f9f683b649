"""A run whose first attempt wrote ledger format version 2 and whose resume writes version 3 audits as one lineage.

The first attempt is real old code: ``tests/fixtures/v2-resume/`` holds what commit
deebb79 wrote (``tests/fixtures/write_v2_resume_fixture.py``) during a tiny CPU fit
of 12 samples in batches of 3: a checkpoint after batch 6 (inside epoch 1) and the
version-2 ledger of an attempt that crashed after batch 7. Here the code at hand
resumes that checkpoint into a copy of the same ledger folder and the audit reads
both files.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

from composer_sampling import SampleLedger, SamplerSync
from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import MAGIC, read_ledger

from support.helpers import fixture_writer

FIXTURE = Path(__file__).resolve().parents[1] / 'fixtures' / 'v2-resume'





def _resume(run: Path) -> list[list[Any]]:
    """Resume the fixture's checkpoint with the code at hand, its ledger into ``run/ledger``; the batches trained."""
    fit = fixture_writer()
    written = json.loads((run / 'written.json').read_text())
    trained = fit.Trained()
    callbacks = [SamplerSync(data_seed=fit.DATA_SEED), SampleLedger(str(run / 'ledger')), trained]
    trainer = fit.tiny_trainer(fit.sync_loader('sampler'), callbacks, load_path=str(run / written['checkpoint']))
    try:
        trainer.fit()
    finally:
        trainer.close()
    return trained.batches


def _index_bytes_on_disk(path: Path) -> float:
    """Bytes a stored index takes in the ledger file ``path``: its records' bytes less their fixed parts, per index."""
    ledger, data = read_ledger(path), path.read_bytes()
    (length,) = struct.unpack_from('<I', data, len(MAGIC))
    records = len(data) - (len(MAGIC) + 4 + length + 4)
    indices = sum(record.indices.size for record in ledger.records)
    return (records - len(ledger.records) * (16 + 4)) / indices


def test_a_v2_first_attempt_and_its_v3_resume_audit_as_one_lineage(tmp_path: Path) -> None:
    run = tmp_path / 'run'
    shutil.copytree(FIXTURE, run)
    written = json.loads((run / 'written.json').read_text())
    resumed = _resume(run)
    # the resume trains the rest of epoch 1 in the first attempt's order (batch 7 again: the crash lost it)
    assert resumed[0] == written['trained'][written['checkpoint_batch']]
    assert [epoch for epoch, _ in resumed] == [1, 1]

    paths = {read_ledger(path).header['version']: path for path in (run / 'ledger').glob('*.bin')}
    assert sorted(paths) == [2, 3] and len(list((run / 'ledger').glob('*.bin'))) == 2
    old, new = read_ledger(paths[2]), read_ledger(paths[3])
    assert old.header['attempt'] == written['header']['attempt'] and 'index_bytes' not in old.header
    assert new.header['index_bytes'] == 4
    assert _index_bytes_on_disk(paths[2]) == 8 and _index_bytes_on_disk(paths[3]) == 4
    assert new.header['lineage'] == old.header['lineage']
    assert new.header['resumed_from'] == {'attempt': old.header['attempt'], 'batch': written['checkpoint_batch']}

    report = audit_folder(run)
    assert report.lineage == [old.header['attempt'], new.header['attempt']]
    assert not report.abandoned and report.tie is None and not report.torn
    assert report.superseded == 3  # the samples of the crashed attempt's batch 7, trained again by the resume
    assert report.dataset_len == 12 and not report.violations
    assert [(e.epoch, e.trained, e.exactly_once, e.repeated, e.missing, e.status) for e in report.epochs] == [
        (0, 12, 12, 0, 0, 'ok'), (1, 12, 12, 0, 0, 'ok')]
