"""The ledger file format and SampleLedger in a real Trainer."""

from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from composer import Trainer
from composer.models import ComposerModel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset, TensorDataset

from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync
from composer_sampling.callbacks.sample_ledger import read_indices
from composer_sampling.ledger_format import MAGIC, LedgerError, LedgerWriter, read_ledger
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import main

from support.helpers import synthetic, train_with_ledger

ROOT = Path(__file__).resolve().parents[2]

records_strategy = st.lists(
    st.tuples(st.integers(0, 2**31), st.integers(0, 2**62), st.lists(st.integers(0, 2**62), max_size=20)),
    max_size=20,
)


@given(records=records_strategy)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_round_trip(tmp_path_factory, records) -> None:
    path = tmp_path_factory.mktemp('ledger') / 'rank0.bin'
    writer = LedgerWriter(path, {'rank': 0, 'note': 'x'})
    for epoch, batch, indices in records:
        writer.append(epoch, batch, indices)
    writer.close()
    ledger = read_ledger(path)
    header, read = ledger.header, ledger.records
    assert header['note'] == 'x'
    assert [(r.epoch, r.batch, r.indices.tolist()) for r in read] == [(e, b, list(i)) for e, b, i in records]


def _written(tmp_path: Path) -> Path:
    path = tmp_path / 'rank0.bin'
    writer = LedgerWriter(path, {'rank': 0})
    writer.append(0, 1, [1, 2, 3])
    writer.append(0, 2, [4, 5, 6])
    writer.close()
    return path


def test_a_torn_last_record_is_reported_and_the_records_before_it_are_read(tmp_path: Path) -> None:
    path = _written(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    ledger = read_ledger(path)
    assert [record.batch for record in ledger.records] == [1]
    assert ledger.torn is not None and re.search(r'rank0.bin: the last record \(batch 2, 3 samples\) is torn: \d+ of '
                                                 r'its \d+ bytes were written, so its 3 samples could not be read',
                                                 ledger.torn)
    path.write_bytes(data[:-34])  # less than a record header
    assert 'the last record is torn' in read_ledger(path).torn


def test_damage_before_the_tail_and_other_files_are_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-2] + bytes([data[-2] ^ 0xFF]) + data[-1:])
    with pytest.raises(LedgerError, match=r'is corrupted: the record at byte \d+ fails its checksum'):
        read_ledger(path)
    first_record_crc = len(data) - 20 - 5  # the first record's checksum (the second record is 20 + 4 bytes)
    path.write_bytes(data[:first_record_crc] + bytes([data[first_record_crc] ^ 0xFF]) + data[first_record_crc + 1:])
    with pytest.raises(LedgerError, match=r'is corrupted: the record at byte \d+ fails its checksum'):
        read_ledger(path)
    path.write_bytes(b'PK\x03\x04' + data)
    with pytest.raises(LedgerError, match='is not a composer-sampling ledger'):
        read_ledger(path)
    path.write_bytes(data[:12])
    with pytest.raises(LedgerError, match='is truncated inside its header'):
        read_ledger(path)
    with pytest.raises(LedgerError, match='cannot read ledger'):
        read_ledger(tmp_path / 'absent.bin')


def test_indices_take_four_bytes_below_two_to_the_32(tmp_path: Path) -> None:
    small, large = tmp_path / 'small.bin', tmp_path / 'large.bin'
    for path, length in ((small, 1000), (large, 2**40)):
        writer = LedgerWriter(path, {'rank': 0, 'dataset_len': length})
        writer.append(0, 1, list(range(100)))
        writer.close()
    assert read_ledger(small).header['index_bytes'] == 4 and read_ledger(large).header['index_bytes'] == 8
    header_growth = len(str(2**40)) - len('1000')
    assert large.stat().st_size - small.stat().st_size == 100 * 4 + header_growth
    assert read_ledger(small).records[0].indices.tolist() == list(range(100))


@given(dataset_len=st.sampled_from([None, 5, 2**32, 2**32 + 1, 2**62]), data=st.data())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None, max_examples=50)
def test_a_list_of_ints_is_written_as_numpy_writes_it(tmp_path_factory, dataset_len: int | None, data) -> None:
    """SampleLedger hands the writer the sampler graph's list of ints: the bytes are those of its numpy path."""
    top = (dataset_len or 2**62) - 1
    batches = data.draw(st.lists(st.lists(st.integers(0, top), max_size=9), max_size=5))
    folder = tmp_path_factory.mktemp('ledger')
    for name, kind in (('list', list), ('numpy', np.array)):
        writer = LedgerWriter(folder / f'{name}.bin', {'rank': 0, 'dataset_len': dataset_len})
        for batch, indices in enumerate(batches):
            writer.append(1, batch, kind(indices) if indices else np.zeros(0, np.int64))
        writer.close()
    assert (folder / 'list.bin').read_bytes() == (folder / 'numpy.bin').read_bytes()


@pytest.mark.parametrize('indices', [[-1], [2**32], [3, 2**32 + 7]])
def test_a_list_index_its_width_cannot_hold_fails_before_writing(tmp_path: Path, indices: list[int]) -> None:
    path = tmp_path / 'rank0.bin'
    writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 100})
    writer.append(0, 1, [1, 2])
    with pytest.raises(OverflowError):  # as numpy's conversion of the list refused it
        writer.append(0, 2, indices)
    writer.close()
    assert [(r.batch, r.indices.tolist()) for r in read_ledger(path).records] == [(1, [1, 2])]


def test_the_v2_files_of_earlier_releases_still_read() -> None:
    ledger = read_ledger(ROOT / 'tests' / 'fixtures' / 'ledger-v2' / 'a0-rank0.bin')
    assert ledger.header['version'] == 2 and 'index_bytes' not in ledger.header
    assert [(r.epoch, r.batch, r.indices.tolist()) for r in ledger.records] == [
        (0, 1, [4, 0, 2]), (0, 2, [5, 1, 3]), (1, 3, [1, 2, 3])]


def test_a_short_write_is_completed_and_a_failed_one_leaves_no_partial_record(tmp_path: Path, monkeypatch) -> None:
    import os

    real_write = os.write
    path = tmp_path / 'rank0.bin'
    writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 100})
    monkeypatch.setattr(os, 'write', lambda fd, data: real_write(fd, data[:7]))  # the kernel writes 7 bytes a call
    writer.append(0, 1, [1, 2, 3])
    calls = []

    def fails_halfway(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(28, 'No space left on device')
        return real_write(fd, data[:5])

    monkeypatch.setattr(os, 'write', fails_halfway)
    with pytest.raises(OSError, match='No space left'):
        writer.append(0, 2, [4, 5, 6])
    monkeypatch.setattr(os, 'write', real_write)
    writer.append(0, 3, [7])
    writer.close()
    ledger = read_ledger(path)
    assert [(r.batch, r.indices.tolist()) for r in ledger.records] == [(1, [1, 2, 3]), (3, [7])]
    assert ledger.torn is None


def test_sample_ledger_records_what_the_trainer_trained(tmp_path: Path) -> None:
    dataset = synthetic(50)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    trained = train_with_ledger(loader, '2ep', callbacks_extra=[SampleLedger(str(tmp_path))])
    (path,) = tmp_path.glob('*-rank0.bin')
    ledger = read_ledger(path)
    header, records = ledger.header, ledger.records
    assert [(r.epoch, r.indices.tolist()) for r in records] == trained.batches
    assert [r.batch for r in records] == list(range(1, 15))
    assert (header['dataset_len'], header['world_size'], header['start_batch'], header['padded']) == (50, 1, 0, 0)


class WithoutIndex(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        item = synthetic(8)[index]
        return {'input': item['input'], 'target': item['target']}


def test_batches_without_indices_get_a_clear_error(tmp_path: Path) -> None:
    from support.helpers import make_trainer

    loader = DataLoader(WithoutIndex(), batch_size=4)
    trainer = make_trainer(loader, callbacks=[SampleLedger(str(tmp_path), index_key='index')])
    with pytest.raises(ValueError, match=re.escape(
            "SampleLedger(index_key='index') found no sample indices: the batch is a dict with keys ['input', "
            "'target']. Return the dataset index of each sample from the dataset and pass index_key=<its key>, or "
            'leave index_key None to record what the sampler hands the DataLoader')):
        trainer.fit()
    assert trainer.state.timestamp.batch == 1  # stopped at the first batch


def test_without_index_key_the_ledger_records_what_the_sampler_handed_over(tmp_path: Path) -> None:
    from support.helpers import make_trainer

    loader = DataLoader(WithoutIndex(), batch_size=4, shuffle=True)
    make_trainer(loader, max_duration='2ep', callbacks=[SamplerSync(), SampleLedger(str(tmp_path))]).fit()
    (path,) = tmp_path.glob('*-rank0.bin')
    records = read_ledger(path).records
    assert read_ledger(path).header['source'] == 'sampler'
    for epoch in (0, 1):
        assert sorted(i for r in records if r.epoch == epoch for i in r.indices.tolist()) == list(range(8))


class TupleModel(ComposerModel):
    """A linear classifier for ``(input, target, index)`` batches."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(64, 10)

    def forward(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.net(batch[0])

    def loss(self, outputs: torch.Tensor, batch: tuple[torch.Tensor, ...], *args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(outputs, batch[1])


def _tuple_loader(size: int = 24) -> DataLoader:
    items = [synthetic(size)[index] for index in range(size)]
    dataset = TensorDataset(torch.stack([torch.as_tensor(item['input']) for item in items]),
                            torch.tensor([item['target'] for item in items]), torch.arange(size))
    return DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))


def _fit_tuples(folder: Path, index_key: Any, loader: DataLoader | None = None) -> None:
    model = TupleModel()
    Trainer(model=model, train_dataloader=loader or _tuple_loader(), max_duration='2ep', device='cpu',
            optimizers=torch.optim.SGD(model.parameters(), lr=0.1), device_train_microbatch_size=4,
            progress_bar=False, log_to_console=False, load_progress_bar=False,
            callbacks=[SamplerSync(), SampleLedger(str(folder), index_key=index_key)]).fit()


@pytest.mark.parametrize('index_key', [2, -1, lambda batch: batch[2]], ids=['position', 'negative', 'callable'])
def test_tuple_batches_need_no_subclass(tmp_path: Path, index_key: Any) -> None:
    _fit_tuples(tmp_path, index_key)
    (path,) = tmp_path.glob('*-rank0.bin')
    records = read_ledger(path).records
    assert [r.batch for r in records] == list(range(1, 7))
    for epoch in (0, 1):
        assert sorted(i for r in records if r.epoch == epoch for i in r.indices.tolist()) == list(range(24))


@pytest.mark.parametrize(
    ('index_key', 'message'),
    [
        ('index', "SampleLedger(index_key='index') found no sample indices: the batch is a list of 3 (Tensor[8, 64] "
                  'float32, Tensor[8] int64, Tensor[8] int64). For a tuple or list batch pass index_key=<the position '
                  'of the indices> (0 to 2), or leave index_key None to record what the sampler hands the DataLoader'),
        (3, 'SampleLedger(index_key=3) found no sample indices: the position 3 is outside [0, 3) for a batch that is '
            'a list of 3'),
        (0, 'SampleLedger(index_key=0) read Tensor[8, 64] float32 from a batch that is a list of 3 (Tensor[8, 64] '
            'float32, Tensor[8] int64, Tensor[8] int64): sample indices must be integers'),
        (1, None),  # the targets: integers, but not the indices the sampler handed the DataLoader
    ],
)
def test_a_batch_without_indices_stops_the_first_batch(tmp_path: Path, index_key: Any, message: str | None) -> None:
    loader = _tuple_loader()
    if message is None:
        dataset = TensorDataset(*(tensor[:4] for tensor in loader.dataset.tensors))
        dataset.tensors[1][:] = 7
        loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
        message = ('SampleLedger(index_key=1) read [7, 7, 7, 7] from the first batch, but the sampler graph handed '
                   'the DataLoader')
    with pytest.raises(ValueError, match=re.escape(message)):
        _fit_tuples(tmp_path, index_key, loader)
    assert not list(tmp_path.iterdir()), 'a run stopped before its first record leaves no file'


def test_an_int_index_key_on_a_mapping_batch_says_what_to_pass() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "SampleLedger(index_key=2) found no sample indices: an int index_key is a position in a tuple or list "
            "batch, and the batch is a dict with keys ['index', 'input']. Return the dataset index")):
        read_indices({'input': torch.zeros(2, 3), 'index': torch.tensor([0, 1])}, 2)


@pytest.mark.parametrize('index_key', [True, 1.5, ['index']])
def test_index_key_must_be_a_key_a_position_or_a_callable(index_key: Any) -> None:
    with pytest.raises(TypeError, match=re.escape('index_key must be a str (a mapping key), an int (a position in a '
                                                  'tuple or list batch), a callable batch -> indices, or None')):
        SampleLedger('ledger', index_key=index_key)


def test_state_dict_carries_the_attempt_and_tolerates_older_checkpoints() -> None:
    ledger = SampleLedger('ledger')
    ledger.load_state_dict({'lineage': 'abc'})  # written before attempt, batch and version were recorded
    assert ledger.state_dict() == {'version': 1, 'lineage': 'abc', 'attempt': None, 'batch': None}
    ledger.load_state_dict({'lineage': 'abc', 'attempt': 'f00d', 'batch': 30})
    assert ledger.state_dict() == {'version': 1, 'lineage': 'abc', 'attempt': 'f00d', 'batch': 30}
    with pytest.raises(ValueError, match="SampleLedger state has batch='30'; it must be a int or None"):
        ledger.load_state_dict({'lineage': 'abc', 'attempt': 'f00d', 'batch': '30'})
    with pytest.raises(TypeError, match=r'SampleLedger\.load_state_dict expects a dict, got None'):
        ledger.load_state_dict(None)
    with pytest.raises(ValueError, match='SampleLedger state has version 9; this version of composer-sampling reads'):
        ledger.load_state_dict({'version': 9})
    assert repr(SampleLedger(index_key=np.int64(2))) == "SampleLedger(folder=None, index_key=2)"


def test_the_header_is_checksummed(tmp_path: Path) -> None:
    path = tmp_path / 'rank0.bin'
    LedgerWriter(path, {'rank': 0, 'dataset_len': 50}).close()
    path.write_bytes(path.read_bytes().replace(b'"dataset_len": 50', b'"dataset_len": 51'))
    with pytest.raises(LedgerError, match=r'rank0.bin is corrupted: its header fails its checksum \(was it edited\?\)'):
        read_ledger(path)


@pytest.mark.parametrize('version', [1, 4])
def test_other_format_versions_are_refused(tmp_path: Path, version: int) -> None:
    path = tmp_path / 'rank0.bin'
    text = json.dumps({'version': version, 'rank': 0}).encode()
    record = struct.pack('<IqI', 0, 1, 1) + struct.pack('<q', 0)
    path.write_bytes(MAGIC + struct.pack('<I', len(text)) + text + record + struct.pack('<I', zlib.crc32(record)))
    with pytest.raises(LedgerError, match=re.escape(f'rank0.bin has ledger format version {version}; this version '
                                                    'of composer-sampling reads versions 2 to 3 (version 1 has no '
                                                    'header checksum)')):
        read_ledger(path)


def test_indices_outside_the_dataset_are_refused(tmp_path: Path) -> None:
    path = tmp_path / 'rank0.bin'
    writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 4})
    writer.append(0, 1, [0, 1])
    writer.append(0, 2, [3, 4])
    writer.close()
    with pytest.raises(LedgerError, match=r'rank0.bin: the record of batch 2 \(byte \d+\) holds index 4, outside '
                                          r'\[0, 4\) \(dataset_len in its header\)'):
        read_ledger(path)


def test_recipes_put_the_ledger_in_the_save_folder(tmp_path: Path, capsys) -> None:
    with pytest.raises(RecipeError, match=re.escape('callbacks.sample_ledger writes to {save_folder}/ledger')):
        resolve(load_recipe(ROOT / 'yamls' / 'digits.yaml', ['callbacks.sample_ledger={}']))
    code = main([str(ROOT / 'yamls' / 'digits.yaml'), 'max_duration=4ba', f'save_folder={tmp_path}',
                 'callbacks.sample_ledger={}'])
    assert code == 0
    assert len(list((tmp_path / 'ledger').glob('*-rank0.bin'))) == 1


@pytest.mark.parametrize('ledger_first', [True, False], ids=['ledger_first', 'sync_first'])
def test_the_ledger_records_what_trained_whatever_the_order_of_callbacks(tmp_path: Path, ledger_first: bool) -> None:
    """A map-style loader SamplerSync seeds (a generator per epoch) and resumes mid-epoch: the ledger matches."""
    from support.helpers import ledger_and_trained

    data = synthetic(40)
    recorded, trained = ledger_and_trained(lambda: DataLoader(data, batch_size=8, shuffle=True), tmp_path,
                                           ledger_first=ledger_first, stop=3)
    assert len(trained) == 10
    assert recorded == trained


class ZeroDimTensors(torch.utils.data.Sampler):
    """Yields every index as a 0-d tensor, in reverse."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return iter(torch.arange(self.size).flip(0))


class ByInt(Dataset):
    """The synthetic dataset read by ``int(index)``: it accepts a 0-d tensor as an index."""

    def __init__(self, size: int) -> None:
        self.data = synthetic(size)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: Any) -> Any:
        return self.data[int(index)]


@pytest.mark.parametrize('make_sampler', [lambda n: torch.utils.data.SubsetRandomSampler(np.arange(n)), ZeroDimTensors],
                         ids=['numpy-integers', '0-d-tensors'])
def test_indices_yielded_as_numpy_integers_or_0d_tensors_are_recorded_as_ints(tmp_path: Path, make_sampler) -> None:
    """torch's own SubsetRandomSampler(np.arange(n)) yields numpy integers: the ledger records them as ints."""
    from composer_sampling.audit import audit_folder

    from support.helpers import IndexLedger, make_trainer

    seen = IndexLedger()
    loader = DataLoader(ByInt(24), batch_size=8, sampler=make_sampler(24))
    make_trainer(loader, max_duration='2ep', callbacks=[SamplerSync(), SampleLedger(str(tmp_path)), seen]).fit()
    (path,) = tmp_path.glob('*-rank0.bin')
    assert [(r.epoch, r.indices.tolist()) for r in read_ledger(path).records] == seen.batches
    assert [(e.exactly_once, e.status) for e in audit_folder(tmp_path).epochs] == [(24, 'ok')] * 2


_AUDITED = {'lineage': 'one', 'attempt': 'a1', 'resumed_from': None, 'started': 1.0, 'rank': 0, 'world_size': 1,
            'start_batch': 0, 'start_epoch': 0, 'padded': 0, 'dropped': 0, 'sub_epochs_per_epoch': 1}


@pytest.fixture(scope='module')
def small_ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[bytes, list[int], list[int]]]:
    """Per index width, a real small ledger: its bytes, where each record starts (and the end), and its counts."""
    ledgers = {}
    for width, dataset_len in ((4, 9), (8, 2**33)):
        path = tmp_path_factory.mktemp('small') / 'a1-rank0.bin'
        writer = LedgerWriter(path, {**_AUDITED, 'dataset_len': dataset_len})
        counts = [3, 3, 2, 0, 3, 3, 1]
        rng = np.random.default_rng(width)
        for k, count in enumerate(counts):
            writer.append(k // 3, k + 1, rng.integers(0, 9, count).tolist())
        writer.close()
        data = path.read_bytes()
        sizes = [20 + width * count for count in counts]
        starts = list(np.cumsum([len(data) - sum(sizes), *sizes]))
        ledgers[width] = (data, starts, counts)
    return ledgers


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(width=st.sampled_from([4, 8]), at=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7),
       truncate=st.booleans())
def test_damage_is_corrupted_naming_its_record_and_only_a_cut_last_record_is_torn(
        small_ledgers, tmp_path_factory: pytest.TempPathFactory, width: int, at: float, bit: int,
        truncate: bool) -> None:
    """A bit flipped anywhere, or the file cut anywhere: never a good ledger with fewer records.

    ``audit`` is asked too where it counts in little memory (dataset_len 9, not 2**33).
    """
    from composer_sampling.audit import audit_folder

    data, starts, counts = small_ledgers[width]
    offset = int(at * len(data))
    folder = tmp_path_factory.mktemp('damaged')
    path = folder / 'a1-rank0.bin'
    damaged = bytearray(data)
    if truncate:
        del damaged[offset:]
    else:
        damaged[offset] ^= 1 << bit
    path.write_bytes(bytes(damaged))
    if offset < starts[0]:  # the magic, the header or its checksum
        with pytest.raises(LedgerError):
            read_ledger(path)
        return
    record = int(np.searchsorted(starts, offset, side='right')) - 1
    if not truncate:
        message = rf'a1-rank0\.bin is corrupted: the record at byte {starts[record]} '
        for read in (read_ledger, lambda path: audit_folder(path.parent))[:3 - width // 4]:
            with pytest.raises(LedgerError, match=message):
                read(path)
        return
    ledger = read_ledger(path)
    assert [r.indices.size for r in ledger.records] == counts[:record]
    if offset == starts[record]:  # cut between two records: what a crash between two batches leaves
        assert ledger.torn is None
    else:
        assert ledger.torn is not None and ('the last record is torn' in ledger.torn or
                                            f'the last record (batch {record + 1}, ' in ledger.torn)
    if any(counts[:record]) and width == 4:
        report = audit_folder(folder)
        assert sum(epoch.trained for epoch in report.epochs) == sum(counts[:record])
        assert len(report.torn) == (offset != starts[record])


def test_a_flipped_count_in_the_middle_is_corrupted_not_a_torn_tail(small_ledgers, tmp_path: Path) -> None:
    """The issue's case: one bit of a record's count read as a torn last record dropped every record after it."""
    data, starts, _ = small_ledgers[4]
    damaged = bytearray(data)
    damaged[starts[1] + 12 + 3] ^= 0x10  # the high byte of the second record's count
    path = tmp_path / 'a1-rank0.bin'
    path.write_bytes(bytes(damaged))
    with pytest.raises(LedgerError, match=rf'is corrupted: the record at byte {starts[1]} \(batch 2\) says it holds '
                                          rf'268435459 samples, more than the \d+ bytes left, yet a whole record ends '
                                          rf'the file at byte {starts[-2]}: damage, not a torn last record'):
        read_ledger(path)
