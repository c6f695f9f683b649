"""A recipe run with per-rank ledgers, optionally killing one rank with SIGKILL (for test_fault.py).

    composer -n 2 tests/support/fault_train.py LEDGER_DIR KILL_RANK KILL_AT_BATCH RECIPE [field=value ...]

or, on one rank without a process of its own, ``main([LEDGER_DIR, KILL_RANK, ...])``.

Every rank appends to ``LEDGER_DIR/trained-{run}-rank{r}.jsonl`` one line per trained
batch ({"epoch", "batch", "indices"}) and to ``reads-{run}-rank{r}.jsonl`` one line per
dataset read. ``KILL_RANK`` -1 kills nobody; otherwise that rank sends itself SIGKILL
at the end of batch ``KILL_AT_BATCH`` (a global batch count; with a remote ``save_folder``, once the
checkpoints saved so far and the latest pointer are uploaded), or, for ``KILL_AT_BATCH``
written ``N-save``, while the checkpoint of batch ``N`` is written: after Composer has
taken the state (``State.state_dict``, the callbacks' states included) and opened the
file, before a byte of it is written, as a crash mid-save leaves it (one process,
``save_interval`` in batches).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader, Dataset

from composer_sampling.recipes.build_training import build_run
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.schema import load_recipe
from composer_sampling.train import train


class LoggedReads(Dataset):
    passes_indices_through = True  # sample i is sample i of its dataset: the fingerprint sees through it

    def __init__(self, dataset: Dataset, path: Path) -> None:
        self.dataset = dataset
        self.log = path.open('a', buffering=1)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        self.log.write(json.dumps({'read': index}) + '\n')
        return self.dataset[index]


class TrainedLedger(Callback):
    def __init__(self, path: Path, kill_rank: int, kill_at: str, save_folder: str | None) -> None:
        self.log = path.open('a', buffering=1)
        self.kill_rank, self.kill_in_save = kill_rank, kill_at.endswith('-save')
        self.kill_at_batch, self.save_folder = int(kill_at.removesuffix('-save')), save_folder

    def batch_end(self, state: State, logger: Logger) -> None:
        record = {'epoch': int(state.timestamp.epoch), 'batch': int(state.timestamp.batch),
                  'indices': state.batch['index'].tolist()}
        self.log.write(json.dumps(record) + '\n')
        self.log.flush()
        os.fsync(self.log.fileno())
        if self._killing(state) and not self.kill_in_save:
            _wait_for_uploads(state, logger)
            os.kill(os.getpid(), signal.SIGKILL)

    def fit_start(self, state: State, logger: Logger) -> None:
        """Composer checks a remote checkpoint's upload every 30 s before it uploads the latest pointer: 1 s here."""
        from composer.callbacks import CheckpointSaver

        for callback in state.callbacks:
            if isinstance(callback, CheckpointSaver):
                callback._symlink_upload_wait_before_next_try_in_seconds = 1.0

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        """Runs before Composer's CheckpointSaver (the Trainer appends it after the run's callbacks)."""
        if self._killing(state) and self.kill_in_save and self.save_folder is not None:
            die_while_saving(state, self.save_folder)

    def _killing(self, state: State) -> bool:
        return dist.get_global_rank() == self.kill_rank and int(state.timestamp.batch) == self.kill_at_batch


def die_while_saving(state: State, save_folder: str) -> None:
    """SIGKILL this process as a crash while Composer saves the checkpoint of this batch leaves it: the state taken,
    rank 0's file opened in ``save_folder``, and not a byte written. Call it from a callback's ``batch_checkpoint``,
    which runs before the ``CheckpointSaver`` that the Trainer builds from ``save_folder``."""
    name = f'ep{int(state.timestamp.epoch)}-ba{int(state.timestamp.batch)}-rank0.pt'
    state.state_dict()  # Composer takes the state (the callbacks' included) before it opens the file
    with open(Path(save_folder) / name, 'wb'):  # Composer's open(filename, 'wb'), then torch.save
        os.kill(os.getpid(), signal.SIGKILL)


def _wait_for_uploads(state: State, logger: Logger) -> None:
    """With a remote save folder, the checkpoints saved so far and the latest pointer are in the bucket before the
    kill: the saver's own ``fit_end`` waits for the uploads and uploads the pointer to the last checkpoint."""
    from composer.callbacks import CheckpointSaver

    for callback in state.callbacks:
        if isinstance(callback, CheckpointSaver) and callback.remote_uploader is not None:
            callback.fit_end(state, logger)


def main(argv: list[str]) -> None:
    """Train as the command line says (``argv`` without the script's name); in process too, on one rank."""
    ledger_dir, kill_rank, kill_at, recipe_path, *overrides = argv
    recipe = load_recipe(recipe_path, overrides)
    tag = f'{recipe.run_name}-rank{dist.get_global_rank()}'
    run = build_run(resolve(recipe))
    loader = run.train_loader
    logged = LoggedReads(run.train_dataset, Path(ledger_dir) / f'reads-{tag}.jsonl')
    logged_loader = DataLoader(logged, batch_size=loader.batch_size, sampler=loader.sampler)
    run = dataclasses.replace(run, train_loader=logged_loader, graph=None)  # the summary walks the loader trained
    trained = TrainedLedger(Path(ledger_dir) / f'trained-{tag}.jsonl', int(kill_rank), kill_at, recipe.save_folder)
    try:
        train(recipe, run=run, callbacks=[trained])
    finally:
        logged.log.close()
        trained.log.close()


if __name__ == '__main__':
    main(sys.argv[1:])
