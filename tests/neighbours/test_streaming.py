"""SamplerSync with iterable datasets, one process: mosaicml-streaming's StreamingDataset and plain torch ones.

Every StreamingDataset here reads the same MDS folder (96 samples, 12 batches of 8 an epoch); each
test builds new dataset objects over it, as a new run or a resumed run would.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from composer.loggers import InMemoryLogger
from torch.utils.data import DataLoader, IterableDataset

from composer_sampling import SamplerSync
from composer_sampling.callbacks.sampler_sync import DataOrderError

from support.helpers import IndexLedger, checkpoint, ledger_and_trained, make_trainer, synthetic
from support.helpers import train_with_ledger as train
from support.streaming_helpers import BATCH, SIZE, STREAMING_DEFAULT_SEED, streaming_loader, write_mds


@pytest.fixture(scope='module')
def mds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_mds(tmp_path_factory.mktemp('mds') / 'data')


def _fit(loader: DataLoader, *, seed: int, epochs: int = 2, sync: SamplerSync | None = None,
         **kwargs: Any) -> IndexLedger:
    ledger = IndexLedger()
    make_trainer(loader, max_duration=f'{epochs}ep', seed=seed, callbacks=[sync or SamplerSync(), ledger],
                 **kwargs).fit()
    return ledger


def _messages(caught: list[warnings.WarningMessage], text: str) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning) and text in str(w.message)]


def _recording(run: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        result = run()
    return result, caught


@pytest.mark.parametrize('num_workers', [0, 2])
def test_the_trainer_seed_becomes_the_shuffle_seed(mds: Path, num_workers: int) -> None:
    loaders = {name: streaming_loader(mds, num_workers=num_workers) for name in ('one', 'one_again', 'two')}
    one = _fit(loaders['one'], seed=1).trained
    assert one == _fit(loaders['one_again'], seed=1).trained
    two = _fit(loaders['two'], seed=2).trained
    assert one != two, 'trainer seeds 1 and 2 must give different data orders'
    assert [loaders[name].dataset.shuffle_seed for name in loaders] == [1, 1, 2]
    for order in (one, two):
        assert sorted(order) == [0, 1]
        assert all(sorted(order[epoch]) == list(range(SIZE)) for epoch in (0, 1))
        assert order[0] != order[1], 'each epoch is a new order'
    if num_workers:  # streaming's order does not depend on the number of workers: the seed reached them
        assert one == _fit(streaming_loader(mds), seed=1).trained


def test_the_data_seed_is_logged_and_kept(mds: Path) -> None:
    logger = InMemoryLogger()
    sync = SamplerSync()
    make_trainer(streaming_loader(mds), max_duration='1ba', seed=23, loggers=[logger], callbacks=[sync]).fit()
    assert logger.hyperparameters['data_seed'] == 23
    assert sync.seed_in_use == 23


def test_data_seed_wins_over_the_trainer_seed(mds: Path) -> None:
    loader = streaming_loader(mds)
    sync = SamplerSync(data_seed=1234)
    chosen = _fit(loader, seed=1, sync=sync).trained
    assert loader.dataset.shuffle_seed == 1234
    assert sync.seed_in_use == 1234
    assert chosen == _fit(streaming_loader(mds), seed=2, sync=SamplerSync(data_seed=1234)).trained
    assert chosen != _fit(streaming_loader(mds), seed=1).trained
    # Exactly streaming's own order for shuffle_seed=1234, trained without SamplerSync.
    reference = IndexLedger()
    make_trainer(streaming_loader(mds, shuffle_seed=1234), max_duration='2ep', seed=1, callbacks=[reference]).fit()
    assert chosen == reference.trained


def test_an_explicit_shuffle_seed_is_replaced_with_one_warning(mds: Path) -> None:
    loader = streaming_loader(mds, shuffle_seed=42)
    ledger, caught = _recording(lambda: _fit(loader, seed=1))
    (message,) = _messages(caught, 'had seed')
    assert 'had seed 42' in message
    assert 'SamplerSync(data_seed=42)' in message, 'the warning says how to keep the old seed'
    assert loader.dataset.shuffle_seed == 1
    assert ledger.trained == _fit(streaming_loader(mds), seed=1).trained


def test_the_default_shuffle_seed_or_a_matching_data_seed_does_not_warn(mds: Path) -> None:
    default = streaming_loader(mds)
    assert default.dataset.shuffle_seed == STREAMING_DEFAULT_SEED
    _, caught = _recording(lambda: _fit(default, seed=1))
    assert not _messages(caught, 'had seed')
    assert not _messages(caught, 'cannot order'), 'SamplerSync orders a StreamingDataset'
    assert default.dataset.shuffle_seed == 1

    matching = streaming_loader(mds, shuffle_seed=42)
    _, caught = _recording(lambda: _fit(matching, seed=1, sync=SamplerSync(data_seed=42)))
    assert not _messages(caught, 'had seed')
    assert matching.dataset.shuffle_seed == 42


@pytest.mark.parametrize('stop', [5, 17])  # in the first epoch; in the second, after a whole epoch
def test_mid_epoch_resume_trains_exactly_the_rest(mds: Path, tmp_path: Path, stop: int) -> None:
    whole = train(streaming_loader(mds), '2ep', seed=1)
    train(streaming_loader(mds), f'{stop}ba', folder=tmp_path, seed=1)
    saved = torch.load(checkpoint(tmp_path, stop), map_location='cpu', weights_only=False)
    stream_state = saved['state']['dataset_state']['train']
    assert stream_state['shuffle_seed'] == 1, 'Composer checkpoints the StreamingDataset with the data seed'
    epoch, batch_in_epoch = divmod(stop, SIZE // BATCH)
    assert (stream_state['epoch'], stream_state['sample_in_epoch']) == (epoch, BATCH * batch_in_epoch)

    loader = streaming_loader(mds)  # a new dataset object over the same folder, as a new process would build
    resumed = train(loader, '2ep', load=checkpoint(tmp_path, stop), seed=1)
    assert resumed.batches == whole.batches[stop:]
    assert loader.dataset.shuffle_seed == 1


def test_a_resume_onto_rewritten_shards_is_refused(tmp_path: Path) -> None:
    """Shards written again with other samples of the same size: the index's hashes differ, so the fingerprint does
    (shards without hashes in their index are seen only at the edges of each local shard file, as docs/resume.md
    says)."""
    first = write_mds(tmp_path / 'first', seed=0, hashes=('sha1',))
    train(streaming_loader(first), '5ba', folder=tmp_path / 'run', seed=1)
    rewritten = write_mds(tmp_path / 'rewritten', seed=1, hashes=('sha1',))
    with pytest.raises(DataOrderError, match=r'the train dataset is not the one the checkpoint trained on: its '
                                             r'fingerprint was [0-9a-f]{16}, from the StreamingDataset of 1 stream'):
        train(streaming_loader(rewritten), '2ep', load=checkpoint(tmp_path / 'run', 5), seed=1)
    copy = write_mds(tmp_path / 'copy', seed=0, hashes=('sha1',))  # the same shards in another folder
    assert len(train(streaming_loader(copy), '1ep', load=checkpoint(tmp_path / 'run', 5), seed=1).batches) == 7


def test_a_stream_whose_length_changed_is_refused_mid_epoch_and_named_a_change_of_length(tmp_path: Path) -> None:
    """The issue's case: shards written again with one sample fewer. In the middle of an epoch the epoch's order
    cannot continue, so the resume is refused whatever allow_data_change says; at an epoch's end allow_data_change
    continues with a warning that names the change of length, and the next epoch covers the new length."""
    first = write_mds(tmp_path / 'first', hashes=('sha1',))
    train(streaming_loader(first), f'{SIZE // BATCH + 2}ba', folder=tmp_path / 'run', seed=1)
    shorter = write_mds(tmp_path / 'shorter', size=SIZE - 1, hashes=('sha1',))
    length = f'the train dataset has {SIZE - 1} samples, the checkpoint trained on {SIZE}: a change of length'
    with pytest.raises(DataOrderError, match=length) as refused:
        train(streaming_loader(shorter), '2ep', load=checkpoint(tmp_path / 'run', SIZE // BATCH + 2), seed=1,
              sync=SamplerSync(allow_data_change=True))
    assert 'whatever allow_data_change says' in str(refused.value)
    with pytest.warns(UserWarning, match=f'{length}.*Continuing at the start of an epoch, because allow_data_change'):
        resumed = train(streaming_loader(shorter), '2ep', load=checkpoint(tmp_path / 'run', SIZE // BATCH), seed=1,
                        sync=SamplerSync(allow_data_change=True))
    assert sorted(resumed.trained[1]) == list(range(SIZE - 1)), 'epoch 1 trains every sample of the new length once'


# With workers, streaming restores the checkpointed shuffle_seed only in the worker copies of the dataset, for
# the resumed epoch; the next epoch's workers copy the main process's dataset, whose seed SamplerSync set.
@pytest.mark.parametrize('num_workers', [0, 2])
def test_resume_keeps_the_checkpointed_seed_over_a_new_data_seed(mds: Path, tmp_path: Path,
                                                                  num_workers: int) -> None:
    whole = train(streaming_loader(mds, num_workers=num_workers), '2ep', seed=1)
    train(streaming_loader(mds, num_workers=num_workers), '5ba', folder=tmp_path, seed=1)

    loader = streaming_loader(mds, num_workers=num_workers)
    sync = SamplerSync(data_seed=99)
    with pytest.warns(UserWarning, match='trained with data seed 1, this run asks for 99; keeping 1'):
        resumed = train(loader, '2ep', load=checkpoint(tmp_path, 5), seed=1, sync=sync)
    assert resumed.batches == whole.batches[5:], 'the rest of epoch 0 and all of epoch 1 in the original order'
    assert sync.seed_in_use == 1
    assert loader.dataset.shuffle_seed == 1


class EpochAwareStream(IterableDataset):
    """A plain torch iterable dataset that shuffles by the epoch it was given last."""

    def __init__(self, size: int = SIZE) -> None:
        self.data = synthetic(size)
        self.epoch = 0
        self.given: list[int] = []
        self.iterated_in: list[int] = []

    def __len__(self) -> int:  # Composer counts epochs only for a loader with a length
        return len(self.data)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.given.append(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.iterated_in.append(self.epoch)
        order = np.random.default_rng(self.epoch).permutation(len(self.data))
        return (self.data[int(index)] for index in order)


class EpochBlindStream(IterableDataset):
    """A plain torch iterable dataset with no ``set_epoch``: the same order every epoch."""

    def __init__(self, size: int = SIZE) -> None:
        self.data = synthetic(size)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.data[index] for index in range(len(self.data)))


def test_an_iterable_dataset_with_set_epoch_gets_every_epoch() -> None:
    dataset = EpochAwareStream()
    ledger = _fit(DataLoader(dataset, batch_size=BATCH), seed=1, epochs=3)
    assert dataset.iterated_in == [0, 1, 2], 'each epoch was iterated after set_epoch(epoch)'
    assert sorted(set(dataset.given)) == [0, 1, 2]
    assert dataset.given == sorted(dataset.given)
    assert ledger.trained[0] != ledger.trained[1] != ledger.trained[2]


def test_an_iterable_dataset_without_set_epoch_warns_once() -> None:
    ledger, caught = _recording(lambda: _fit(DataLoader(EpochBlindStream(), batch_size=BATCH), seed=1, epochs=2))
    assert len(_messages(caught, 'cannot order')) == 1, [str(w.message) for w in caught]
    assert len(ledger.batches) == 2 * SIZE // BATCH, 'it still trains'


@pytest.mark.parametrize('num_workers', [0, 2])
def test_the_ledger_records_a_stream_without_help_from_the_batch(mds: Path, tmp_path: Path, num_workers: int) -> None:
    from composer_sampling import SampleLedger
    from composer_sampling.audit import audit_folder

    whole = train(streaming_loader(mds, num_workers=num_workers), '2ep', seed=1,
                  callbacks_extra=[SampleLedger(str(tmp_path / 'whole'))])
    report = audit_folder(tmp_path / 'whole')
    assert [(e.exactly_once, e.status) for e in report.epochs] == [(SIZE, 'ok')] * 2
    ledger = tmp_path / 'resumed'
    train(streaming_loader(mds, num_workers=num_workers), '5ba', folder=tmp_path / 'run', seed=1,
          callbacks_extra=[SampleLedger(str(ledger))])
    resumed = train(streaming_loader(mds, num_workers=num_workers), '2ep', load=checkpoint(tmp_path / 'run', 5),
                    seed=1, callbacks_extra=[SampleLedger(str(ledger))])
    assert resumed.batches == whole.batches[5:]
    assert [(e.exactly_once, e.status) for e in audit_folder(ledger).epochs] == [(SIZE, 'ok')] * 2


def test_a_stream_that_repeats_by_design_is_audited_against_its_own_epochs(tmp_path: Path) -> None:
    from composer_sampling import SampleLedger
    from composer_sampling.audit import audit_folder

    mds = write_mds(tmp_path / 'mds', size=48)
    loader = streaming_loader(mds, epoch_size=72)  # 1.5 passes over 48 samples an epoch: 24 samples twice
    train(loader, '2ep', seed=1, callbacks_extra=[SampleLedger(str(tmp_path / 'ledger'))])
    epochs = audit_folder(tmp_path / 'ledger').epochs
    assert [(e.trained, e.repeated, e.missing, e.status) for e in epochs] == [(72, 0, 0, 'ok')] * 2


def test_print_summary_prints_for_a_stream_too(mds: Path, capsys) -> None:
    _fit(streaming_loader(mds), seed=5, epochs=1, sync=SamplerSync(print_summary=True))
    out = capsys.readouterr().out
    assert 'composer-sampling run summary' in out
    assert 'data seed  5 (the trainer seed)' in out and 'StreamingDataset, an iterable dataset that orders itself ' \
                                                      'with shuffle_seed 5' in out


@pytest.mark.parametrize(('ledger_first', 'num_workers'), [(True, 0), (False, 0), (True, 2)],
                         ids=['ledger_first', 'sync_first', 'ledger_first-workers'])
def test_the_ledger_records_the_stream_that_trained_whatever_the_order_of_callbacks(
        mds: Path, tmp_path: Path, ledger_first: bool, num_workers: int) -> None:
    """SampleLedger before SamplerSync recorded the partition of the default shuffle_seed, not the data seed's."""
    from composer_sampling.audit import audit_folder

    recorded, trained = ledger_and_trained(lambda: streaming_loader(mds, num_workers=num_workers), tmp_path,
                                           ledger_first=ledger_first, stop=5)
    assert len(trained) == 2 * SIZE // BATCH
    assert recorded == trained
    assert [(e.exactly_once, e.status) for e in audit_folder(tmp_path / 'ledger').epochs] == [(SIZE, 'ok')] * 2
