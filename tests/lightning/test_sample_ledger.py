"""The Lightning SampleLedger through a real Lightning ``Trainer`` on one process; the two-rank resume and its audit
are in tests/lightning/dist/test_two_ranks.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl

from composer_sampling.lightning import SampleLedger

from support.lightning_parts import Rebuilt, audit, epochs, fit, loader

pytestmark = pytest.mark.lightning

#: 96 samples, 8 a batch: 12 batches an epoch on one process.
OK = [(0, 96, 0, 0, 'ok'), (1, 96, 0, 0, 'ok')]


class SavesFirst(pl.Callback):
    """A callback listed before the ledger that saves a checkpoint at the end of batch ``step``, before the ledger's
    own hook has heard of that batch, and then copies the ledger folder ``ledger`` to ``crashed``: what a process
    killed right after the checkpoint leaves on disk."""

    def __init__(self, path: Path, step: int, ledger: Path, crashed: Path) -> None:
        self.path, self.step, self.ledger, self.crashed = path, step, ledger, crashed

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)
            shutil.copytree(self.ledger, self.crashed)


@pytest.mark.parametrize(('kind', 'sync', 'ledger'), [
    ('user batch sampler', False, {}),  # a batch sampler of the user's at the top: a loader rebuilt around the tap
    ('stateful', True, {'index_key': 2}),  # torchdata's own batch sampler at the top hides the indices: read the batch
    ('rebuilt every epoch', True, {}),  # a loader built again every epoch keeps the fit's file
])
def test_a_fit_records_every_batch_it_trains(kind: str, sync: bool, ledger: dict[str, Any], tmp_path: Path) -> None:
    ledger_folder = tmp_path / 'ledger'
    train = Rebuilt('torch') if kind == 'rebuilt every epoch' else loader(kind)
    model = fit(train, tmp_path, max_epochs=2, sync=sync, reload=1 if isinstance(train, Rebuilt) else 0,
                callbacks=(SampleLedger(ledger_folder, **ledger),))
    status, report = audit(ledger_folder)
    assert (status, epochs(report)) == (0, OK)
    strategy = model.trainer.strategy
    assert getattr(strategy.process_dataloader, '__func__', None) is type(strategy).process_dataloader, \
        'the strategy has its own method back'


def test_a_checkpoint_saved_before_the_ledger_hears_of_its_batch_holds_it_in_the_ledger(tmp_path: Path) -> None:
    """The checkpoint of step 5 is saved by a callback that comes before the ledger: the ledger records batch 5 and
    writes it when Lightning asks for its state, so the files that a process killed right after the checkpoint leaves
    hold it, and the resume from that checkpoint continues the lineage there."""
    ledger, crashed = tmp_path / 'ledger', tmp_path / 'crashed'
    fit(loader('torch'), tmp_path, max_steps=7,
        callbacks=(SavesFirst(tmp_path / 'early.ckpt', 5, ledger, crashed), SampleLedger(ledger)))
    fit(loader('torch'), tmp_path, max_epochs=2, ckpt_path=str(tmp_path / 'early.ckpt'),
        callbacks=(SampleLedger(crashed),))
    status, report = audit(crashed)
    assert report is not None and [row['counted'] for row in report.attempts] == ['batches 1-5', 'batches 6-24']
    assert (status, epochs(report), report.superseded) == (0, OK, 0)


def test_the_folder_is_a_local_path() -> None:
    with pytest.raises(ValueError, match="got the URI 's3://bucket/run/ledger'"):
        SampleLedger('s3://bucket/run/ledger')
    with pytest.raises(TypeError, match='folder must be a local path'):
        SampleLedger(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match='index_key must be a str'):
        SampleLedger('ledger', index_key=True)
