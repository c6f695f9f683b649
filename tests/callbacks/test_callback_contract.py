"""The contract that Composer holds every callback to, run over both of our Composer callbacks.

Composer's own callback tests run one contract over every callback: fit start and end more
than once, several ``fit`` calls on one Trainer, ``close`` twice and then ``post_close``. Here
the contract runs through a real ``composer.Trainer`` on the CPU, with the tiny demo model,
and checks the data order that each callback is there for: every epoch trains every sample
exactly once, and for the ledger, ``audit`` counts what trained.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from composer import Trainer
from composer.core import Callback, Event, State
from composer.loggers import Logger
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync
from composer_sampling.audit import audit_folder
from composer_sampling.callbacks.sampler_sync import SecondCallbackError

from support.helpers import IndexLedger, make_trainer, synthetic

SAMPLES, BATCH = 32, 8
BATCHES = SAMPLES // BATCH  # batches in an epoch


@dataclass(frozen=True)
class Case:
    """One of our callbacks: how to build it in a test's folder, and how to check what the ledger folder holds."""

    name: str
    make: Callable[[Path], Callback]
    audited: bool  # whether the folder holds a ledger that audit counts


CASES = [
    Case('SamplerSync', lambda folder: SamplerSync(data_seed=5), audited=False),
    Case('SampleLedger', lambda folder: SampleLedger(str(folder / 'ledger')), audited=True),
]


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def _trainer(callback: Callback, recorded: IndexLedger, max_duration: str = '1ep') -> Trainer:
    dataset = synthetic(SAMPLES)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=ResumableDistributedSampler(dataset, 1, 0, seed=3))
    return make_trainer(loader, max_duration=max_duration, callbacks=[callback, recorded])


def _check_epochs(recorded: IndexLedger, epochs: int) -> None:
    """Every epoch up to ``epochs`` trained every sample exactly once."""
    trained = recorded.trained
    assert sorted(trained) == list(range(epochs))
    for epoch, indices in trained.items():
        assert sorted(indices) == list(range(SAMPLES)), f'epoch {epoch}: {collections.Counter(indices)}'


def _check_ledger(case: Case, folder: Path, recorded: IndexLedger, epochs: int) -> None:
    if not case.audited:
        return
    report = audit_folder(folder)
    assert [(epoch.epoch, epoch.exactly_once, epoch.status) for epoch in report.epochs] == \
        [(epoch, SAMPLES, 'ok') for epoch in range(epochs)]
    assert sum(report.per_rank.values()) == sum(len(indices) for _, indices in recorded.batches)


def test_several_fits_on_one_trainer_train_each_epoch_once(case: Case, tmp_path: Path) -> None:
    """An epoch, another, then an epoch in two fits of two batches: three whole epochs, none repeated."""
    recorded = IndexLedger()
    trainer = _trainer(case.make(tmp_path), recorded)
    trainer.fit()
    trainer.fit(duration='1ep')
    trainer.fit(duration=f'{BATCHES // 2}ba')
    trainer.fit(duration=f'{BATCHES // 2}ba')
    assert int(trainer.state.timestamp.batch) == 3 * BATCHES
    _check_epochs(recorded, 3)
    _check_ledger(case, tmp_path, recorded, 3)
    trainer.close()


def test_fit_start_and_end_run_more_than_once(case: Case, tmp_path: Path) -> None:
    """Composer's own contract: FIT_START and FIT_END, twice, by the engine; a fit after them trains as usual."""
    recorded = IndexLedger()
    trainer = _trainer(case.make(tmp_path), recorded)
    for _ in range(2):
        trainer.engine.run_event(Event.FIT_START)
        trainer.engine.run_event(Event.FIT_END)
    trainer.fit()
    _check_epochs(recorded, 1)
    _check_ledger(case, tmp_path, recorded, 1)
    trainer.close()


def test_close_is_idempotent_and_post_close_follows(case: Case, tmp_path: Path) -> None:
    """``close`` twice, by the Trainer and then directly, and ``post_close``: no error, nothing written twice."""
    recorded = IndexLedger()
    callback = case.make(tmp_path)
    trainer = _trainer(callback, recorded)
    trainer.fit()
    files = {path: path.read_bytes() for path in tmp_path.rglob('*.bin')}
    trainer.close()
    trainer.close()
    callback.close(trainer.state, trainer.logger)
    callback.close(trainer.state, trainer.logger)
    callback.post_close()
    assert {path: path.read_bytes() for path in tmp_path.rglob('*.bin')} == files
    assert bool(files) == case.audited
    _check_ledger(case, tmp_path, recorded, 1)


def test_close_before_any_fit_is_idempotent(case: Case, tmp_path: Path) -> None:
    """Composer's ``test_idempotent_close``: INIT (the Trainer is built), then close twice; nothing is written."""
    callback = case.make(tmp_path)
    trainer = _trainer(callback, IndexLedger())
    trainer.close()
    trainer.close()
    callback.close(trainer.state, trainer.logger)
    callback.post_close()
    assert list(tmp_path.iterdir()) == []


def test_the_state_dict_before_any_fit_loads_into_a_fresh_callback(case: Case, tmp_path: Path) -> None:
    callback = case.make(tmp_path)
    _trainer(callback, IndexLedger())
    fresh = case.make(tmp_path)
    fresh.load_state_dict(callback.state_dict())
    assert fresh.state_dict() == callback.state_dict()


def test_a_second_instance_on_one_trainer_is_one_error_when_the_trainer_is_built(case: Case,
                                                                                       tmp_path: Path) -> None:
    """The same mistake gets the same error, a ValueError, from both callbacks, before anything trains."""
    recorded = IndexLedger()
    first, second = case.make(tmp_path / 'a'), case.make(tmp_path / 'b')
    dataset = synthetic(SAMPLES)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=ResumableDistributedSampler(dataset, 1, 0))
    with pytest.raises(ValueError, match=f'2 {case.name} callbacks') as refused:
        make_trainer(loader, callbacks=[first, recorded, second])
    assert type(refused.value) is SecondCallbackError
    assert repr(first) in str(refused.value) and repr(second) in str(refused.value)
    assert not recorded.batches and not list(tmp_path.iterdir())


class RaisesOnce(Callback):
    """Raises at the end of one batch, once: a fit that stops with an exception, whose FIT_END never runs."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.raised = False

    def batch_end(self, state: State, logger: Logger) -> None:
        if not self.raised and int(state.timestamp.batch) == self.batch:
            self.raised = True
            raise KeyboardInterrupt(f'stopped at batch {self.batch}')


def test_a_fit_after_a_fit_that_raised_carries_on_where_it_stopped(case: Case, tmp_path: Path) -> None:
    """The first fit stops inside its first epoch with an exception (no FIT_END); the next fit trains the rest."""
    recorded = IndexLedger()
    dataset = synthetic(SAMPLES)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=ResumableDistributedSampler(dataset, 1, 0, seed=3))
    trainer = make_trainer(loader, max_duration='2ep', callbacks=[case.make(tmp_path), recorded, RaisesOnce(2)])
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    trainer.fit()
    assert int(trainer.state.timestamp.batch) == 2 * BATCHES
    _check_epochs(recorded, 2)
    _check_ledger(case, tmp_path, recorded, 2)
    trainer.close()
