"""LedgerHeader: the files it writes are the bytes of the dict the callback wrote before it, and the fixtures read."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync
from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import MAGIC, LedgerError, LedgerHeader, LedgerWriter, read_ledger

from support.helpers import make_trainer, synthetic

FIXTURES = Path(__file__).resolve().parents[1] / 'fixtures'


def _dict_before(values: dict[str, Any], lineage_start: int | None, dataset: dict[str, int]) -> dict[str, Any]:
    """The header dict that SampleLedger.fit_start built as a literal up to commit 8dcec7f, from the same values."""
    header: dict[str, Any] = {
        'lineage': values['lineage'],
        'attempt': values['attempt'],
        'resumed_from': values['resumed_from'],
        'started': values['started'],
        'run_name': values['run_name'],
        'rank': values['rank'],
        'world_size': values['world_size'],
        'start_batch': values['start_batch'],
        'start_epoch': values['start_epoch'],
        'sub_epochs_per_epoch': 1,
        'replication': 1,
        **({} if lineage_start is None else {'lineage_start': lineage_start}),
    }
    header['source'] = values['source']
    header.update(dataset)
    return header


def _header_bytes(path: Path) -> bytes:
    """The magic, the length, the JSON text and the checksum of a ledger file's header."""
    data = path.read_bytes()
    length = int.from_bytes(data[len(MAGIC):len(MAGIC) + 4], 'little')
    return data[:len(MAGIC) + 4 + length + 4]


VALUES = {'lineage': '3be2079e765e4ffe8da7d344f2cae7e7', 'attempt': '6f0fda79367a469d', 'started': 1795447617.7260258,
          'run_name': 'run-1', 'rank': 1, 'world_size': 2, 'start_batch': 7, 'start_epoch': 1}
#: The dataset fields of each source, as fit_start filled them in: map-style, a stream, a batch with no DataLoader.
DATASETS = {
    'sampler': {'dataset_len': 12, 'padded': 0, 'dropped': 2, 'sub_epochs_per_epoch': 3, 'replication': 1},
    'stream': {'dataset_len': 5000, 'replication': 2},
    'batch': {},
}


@pytest.mark.parametrize('source', sorted(DATASETS))
@pytest.mark.parametrize('lineage_start', [None, 7])
@pytest.mark.parametrize('resumed_from', [None, {'attempt': 'a0', 'batch': 3}])
def test_a_typed_header_writes_the_bytes_of_the_dict_literal_it_replaced(
        tmp_path: Path, source: str, lineage_start: int | None, resumed_from: dict[str, Any] | None) -> None:
    values = {**VALUES, 'source': source, 'resumed_from': resumed_from}
    typed = LedgerHeader(**values, lineage_start=lineage_start, **DATASETS[source])
    LedgerWriter(tmp_path / 'new.bin', typed.to_dict()).close()
    LedgerWriter(tmp_path / 'old.bin', _dict_before(values, lineage_start, DATASETS[source])).close()
    assert (tmp_path / 'new.bin').read_bytes() == (tmp_path / 'old.bin').read_bytes()


def test_the_v3_fixture_written_by_the_callback_is_rewritten_byte_for_byte_from_its_typed_header(
        tmp_path: Path) -> None:
    (fixture,) = (FIXTURES / 'ledger-v3').glob('*.bin')
    header = read_ledger(fixture).header
    typed = LedgerHeader.read(fixture, header)
    assert (typed.source, typed.dataset_len, typed.padded, typed.lineage_start) == ('sampler', 12, 0, None)
    LedgerWriter(tmp_path / fixture.name, typed.to_dict()).close()
    assert _header_bytes(tmp_path / fixture.name) == _header_bytes(fixture)


@pytest.mark.parametrize('version', ['ledger-v2', 'ledger-v3'])
def test_the_fixtures_still_read_and_audit(tmp_path: Path, version: str) -> None:
    (fixture,) = (FIXTURES / version).glob('*.bin')
    typed = LedgerHeader.read(fixture, read_ledger(fixture).header)
    assert (typed.rank, typed.world_size, typed.start_batch, typed.resumed_from) == (0, 1, 0, None)
    assert typed.source == (None if version == 'ledger-v2' else 'sampler')  # version 2 files do not name it
    shutil.copytree(FIXTURES / version, tmp_path / version)
    report = audit_folder(tmp_path / version)
    assert report.dataset_len == typed.dataset_len and not report.violations


def test_a_fit_writes_the_header_the_dict_literal_wrote(tmp_path: Path) -> None:
    """Through a real Trainer: the header of each rank file is the bytes of the old literal with its values, and the
    train dataset's fingerprint after them, the one field added since."""
    dataset = synthetic(40)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset, 1, 0, drop_last=True))
    make_trainer(loader, max_duration='1ep', callbacks=[SamplerSync(), SampleLedger(str(tmp_path / 'ledger'))]).fit()
    (path,) = (tmp_path / 'ledger').glob('*.bin')
    header = read_ledger(path).header
    assert header['source'] == 'sampler' and header['dataset_len'] == 40
    dataset_fields = {key: header[key] for key in ('dataset_len', 'padded', 'dropped', 'sub_epochs_per_epoch',
                                                   'replication')}
    assert header['data_fingerprint']['covers_content'] is True
    literal = {**_dict_before(header, None, dataset_fields), 'data_fingerprint': header['data_fingerprint']}
    LedgerWriter(tmp_path / 'old.bin', literal).close()
    assert _header_bytes(path) == _header_bytes(tmp_path / 'old.bin')


@pytest.mark.parametrize(('change', 'message'), [
    ({'dataset_len': None}, "has no ['dataset_len'] in its header"),
    ({'rank': 2}, 'has rank=2 in its header, outside [0, 2) for its world_size'),
    ({'padded': -1}, 'has padded=-1 in its header; it must be an int >= 0'),
    ({'started': 'noon'}, "has started='noon' in its header; it must be a time in seconds"),
    ({'lineage': 5}, 'has lineage=5 in its header; it must be a str (an id)'),
    ({'resumed_from': {'attempt': 'a'}}, "has resumed_from={'attempt': 'a'} in its header; it must be None or"),
])
def test_reading_a_header_names_the_field_and_its_valid_range(change: dict[str, Any], message: str) -> None:
    header = {**LedgerHeader(**VALUES, source='sampler', dataset_len=12).to_dict(), **change}
    header = {key: value for key, value in header.items() if value is not None}
    with pytest.raises(LedgerError, match=re.escape(f'a-rank1.bin {message}')):
        LedgerHeader.read(Path('a-rank1.bin'), header)


@pytest.mark.parametrize(('location', 'object_store', 'download'), [
    ('s3://bucket/run/ledger', 's3', 's3'),
    ('s3:/bucket/run/ledger', 's3', 's3'),  # what Path makes of a URI: still a bucket, never a local folder
    ('C:/runs/ledger', None, 'c'),  # a Windows drive is a local folder, though urlparse gives it a scheme
    ('runs/s3/ledger', None, None),
])
def test_the_two_scheme_functions_answer_two_questions(location: str, object_store: str | None,
                                                        download: str | None) -> None:
    """Where a ledger goes (object_store_scheme) and what Composer downloads (download_scheme): one answer each."""
    from composer_sampling._checkpoint.safe_load import download_scheme
    from composer_sampling.ledger_format import object_store_scheme

    assert (object_store_scheme(location), download_scheme(location)) == (object_store, download)
