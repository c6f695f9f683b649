"""The ledger file format and SampleLedger in a real Trainer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

from composer_sampling import ResumableDistributedSampler, SampleLedger
from composer_sampling.build import build_callbacks
from composer_sampling.ledger import LedgerError, LedgerWriter, read_ledger
from composer_sampling.recipe import RecipeError, load_recipe
from composer_sampling.train import main

from helpers import synthetic, train_with_ledger

ROOT = Path(__file__).resolve().parent.parent

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
    header, read = read_ledger(path)
    assert header['note'] == 'x'
    assert [(r.epoch, r.batch, r.indices.tolist()) for r in read] == [(e, b, list(i)) for e, b, i in records]


def _written(tmp_path: Path) -> Path:
    path = tmp_path / 'rank0.bin'
    writer = LedgerWriter(path, {'rank': 0})
    writer.append(0, 1, [1, 2, 3])
    writer.append(0, 2, [4, 5, 6])
    writer.close()
    return path


def test_truncated_and_corrupted_files_are_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    with pytest.raises(LedgerError, match=r'rank0.bin is truncated: the record at byte \d+ needs 44 bytes, 39'):
        read_ledger(path)
    path.write_bytes(data[:-2] + bytes([data[-2] ^ 0xFF]) + data[-1:])
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


def test_sample_ledger_records_what_the_trainer_trained(tmp_path: Path) -> None:
    dataset = synthetic(50)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    ledger = train_with_ledger(loader, '2ep', callbacks_extra=[SampleLedger(str(tmp_path))])
    (path,) = tmp_path.glob('*-rank0.bin')
    header, records = read_ledger(path)
    assert [(r.epoch, r.indices.tolist()) for r in records] == ledger.batches
    assert [r.batch for r in records] == list(range(1, 15))
    assert (header['dataset_len'], header['world_size'], header['start_batch'], header['padded']) == (50, 1, 0, 0)


class WithoutIndex(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        item = synthetic(8)[index]
        return {'input': item['input'], 'target': item['target']}


def test_batches_without_indices_get_a_clear_error(tmp_path: Path) -> None:
    from helpers import make_trainer

    loader = DataLoader(WithoutIndex(), batch_size=4)
    trainer = make_trainer(loader, callbacks=[SampleLedger(str(tmp_path))])
    with pytest.raises(ValueError, match="SampleLedger needs every batch to be a mapping with the sample indices under "
                                         "'index'; got a dict with keys \\['input', 'target'\\]"):
        trainer.fit()


def test_recipes_put_the_ledger_in_the_save_folder(tmp_path: Path, capsys) -> None:
    with pytest.raises(RecipeError, match=re.escape('callbacks.sample_ledger writes to {save_folder}/ledger')):
        build_callbacks(load_recipe(ROOT / 'yamls' / 'digits.yaml', ['callbacks.sample_ledger={}']))
    code = main([str(ROOT / 'yamls' / 'digits.yaml'), 'max_duration=4ba', f'save_folder={tmp_path}',
                 'callbacks.sample_ledger={}'])
    assert code == 0
    assert len(list((tmp_path / 'ledger').glob('*-rank0.bin'))) == 1
