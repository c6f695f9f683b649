"""A resume onto changed data is refused through a real Composer Trainer: the train dataset's fingerprint goes into
every checkpoint and is compared at fit start; unchanged data rebuilt in a new process resumes as before."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, TensorDataset

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.callbacks.sampler_sync import DataOrderError
from composer_sampling.recipes.demo.data import SyntheticDataset

from support.helpers import checkpoint, synthetic
from support.helpers import train_with_ledger as train

BATCH = 8


def _loader(dataset: Dataset) -> DataLoader:
    return DataLoader(dataset, batch_size=BATCH, sampler=ResumableDistributedSampler(dataset))


class Rows(Dataset):
    """Samples in the demo model's format, from a tensor of features: a TensorDataset a user would write."""

    def __init__(self, features: torch.Tensor) -> None:
        self.table = TensorDataset(features)

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, index: int) -> dict[str, Any]:
        (features,) = self.table[index]
        return {'input': features, 'target': torch.tensor(index % 10), 'index': index}

    @property
    def fingerprint(self) -> str:
        from composer_sampling._fingerprint import dataset_fingerprint

        return dataset_fingerprint(self.table).digest


def _features(seed: int, size: int = 48) -> torch.Tensor:
    return torch.randn(size, 64, generator=torch.Generator().manual_seed(seed))


class Named(Dataset):
    """The demo's synthetic samples, with a fingerprint the user names."""

    def __init__(self, seed: int, name: str) -> None:
        self.data = SyntheticDataset(48, seed=seed)
        self.fingerprint = name

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.data[index]


@pytest.mark.parametrize('changed', ['seed of the synthetic data', 'tensor', 'order of the concatenated parts'])
def test_data_changed_at_the_same_length_is_refused_naming_both_fingerprints(changed: str, tmp_path: Path) -> None:
    if changed == 'seed of the synthetic data':
        first, second = synthetic(48), SyntheticDataset(48, seed=1)
    elif changed == 'tensor':
        first, second = Rows(_features(0)), Rows(_features(1))
    else:
        first = ConcatDataset([synthetic(24), SyntheticDataset(24, seed=1)])
        second = ConcatDataset([SyntheticDataset(24, seed=1), synthetic(24)])
    train(_loader(first), '3ba', folder=tmp_path)
    with pytest.raises(DataOrderError) as refused:
        train(_loader(second), '1ep', load=checkpoint(tmp_path, 3))
    message = str(refused.value)
    assert 'the train dataset is not the one the checkpoint trained on' in message
    fingerprints = re.findall(r'\b[0-9a-f]{16}\b', message)
    assert len(set(fingerprints)) == 2, message
    assert 'SamplerSync(allow_data_change=True)' in message and 'callbacks.sampler_sync.allow_data_change' in message


def test_unchanged_data_rebuilt_resumes_exactly_without_a_word(tmp_path: Path) -> None:
    whole = train(_loader(Rows(_features(0))), '1ep')
    train(_loader(Rows(_features(0))), '3ba', folder=tmp_path)
    with warnings.catch_warnings():
        warnings.filterwarnings('error', message='.*fingerprint.*')
        resumed = train(_loader(Rows(_features(0))), '1ep', load=checkpoint(tmp_path, 3))
    assert resumed.batches == whole.batches[3:]


def test_allow_data_change_continues_with_a_warning(tmp_path: Path) -> None:
    train(_loader(synthetic(48)), '3ba', folder=tmp_path)
    with pytest.warns(UserWarning, match='Continuing, because allow_data_change is true'):
        resumed = train(_loader(SyntheticDataset(48, seed=1)), '1ep', load=checkpoint(tmp_path, 3),
                        sync=SamplerSync(allow_data_change=True))
    assert len(resumed.batches) == 48 // BATCH - 3, 'the rest of the epoch, on the new data'


def test_a_datasets_own_fingerprint_wins_over_its_content(tmp_path: Path) -> None:
    train(_loader(Named(0, 'corpus v1')), '3ba', folder=tmp_path)
    resumed = train(_loader(Named(1, 'corpus v1')), '1ep', load=checkpoint(tmp_path, 3))  # content differs, name not
    assert len(resumed.batches) == 48 // BATCH - 3
    with pytest.raises(DataOrderError, match="Named's own fingerprint 'corpus v1'"):
        train(_loader(Named(0, 'corpus v2')), '1ep', load=checkpoint(tmp_path, 3))


def test_a_later_fit_may_train_other_data(tmp_path: Path) -> None:
    """Only the first fit after a load is checked: a fit() with another train_dataloader is the user's choice."""
    from support.helpers import make_trainer

    train(_loader(synthetic(48)), '3ba', folder=tmp_path)
    trainer = make_trainer(_loader(synthetic(48)), max_duration='1ep', callbacks=[SamplerSync()],
                           load_path=str(checkpoint(tmp_path, 3)))
    trainer.fit()
    trainer.fit(train_dataloader=_loader(SyntheticDataset(48, seed=1)), duration='1ep')
    assert int(trainer.state.timestamp.epoch) == 2


def test_a_fit_on_two_to_the_62_samples_computes_its_fingerprint_at_fit_start() -> None:
    """The issue's regression through a real Composer fit: SamplerSync fingerprints the train dataset at fit start,
    here a Subset over a range of 2**62 indices, whose positions once went through float64 (IndexError)."""
    from torch.utils.data import Subset

    from support.helpers import IndexLedger, make_trainer

    dataset = Subset(SyntheticDataset(5 * 2**60), range(2**62))
    ledger, sync = IndexLedger(), SamplerSync()
    make_trainer(_loader(dataset), max_duration='1ba', callbacks=[sync, ledger]).fit()
    assert len(ledger.batches) == 1 and all(0 <= index < 2**62 for index in ledger.batches[0][1])
    state = sync.state_dict()
    assert state['data_fingerprint'][3] == 2**62, 'the sample count the checkpoint keeps'


def test_a_change_of_length_is_named_and_refused_in_the_middle_of_an_epoch_whatever_allow_data_change_says() -> None:
    from composer_sampling._fingerprint import Fingerprint
    from composer_sampling._resume.data_identity import check_data
    from composer_sampling.errors import DataOrderError

    saved, now = Fingerprint('ab' * 16, 'a stream', True, 27), Fingerprint('cd' * 16, 'a stream', True, 26)
    length = 'SamplerSync: the train dataset has 26 samples, the checkpoint trained on 27: a change of length'
    for allow in (False, True):
        with pytest.raises(DataOrderError, match=length) as refused:
            check_data(saved, now, allow, mid_epoch=True)
        assert 'the rest of that epoch cannot continue on 26 samples, whatever allow_data_change says' in \
            str(refused.value)
    with pytest.raises(DataOrderError, match=length) as refused:
        check_data(saved, now, False, mid_epoch=False)
    assert 'SamplerSync(allow_data_change=True)' in str(refused.value)
    with pytest.warns(UserWarning, match=f'{length}.*Continuing at the start of an epoch, because allow_data_change '
                                         'is true: its order is drawn over the 26 samples'):
        check_data(saved, now, True, mid_epoch=False)
    unknown = Fingerprint('ef' * 16, 'a stream', True, None)  # a checkpoint written before the count was kept
    with pytest.raises(DataOrderError, match='the train dataset is not the one the checkpoint trained on'):
        check_data(unknown, now, False, mid_epoch=True)


def test_the_checkpoint_entry_keeps_the_sample_count_and_reads_the_triples_of_older_checkpoints() -> None:
    from composer_sampling._fingerprint import Fingerprint
    from composer_sampling._resume.data_identity import fingerprint_entry, read_fingerprint

    fingerprint = Fingerprint('ab' * 16, 'a test', True, 12)
    assert fingerprint_entry(fingerprint) == ('ab' * 16, 'a test', True, 12)
    assert read_fingerprint(fingerprint_entry(fingerprint), 'state') == fingerprint
    assert read_fingerprint(['ab' * 16, 'a test', True], 'state') == Fingerprint('ab' * 16, 'a test', True, None)
    for wrong in (('ab' * 16, 'a test', True, -1), ('ab' * 16, 'a test', True, True), ('ab' * 16, 'a test', True, 1.0),
                  ('ab' * 16, 'a test', True, 1, 2)):
        with pytest.raises(TypeError, match=r'state must be None, a \(digest, source, covers content\) triple or a '):
            read_fingerprint(wrong, 'state')
