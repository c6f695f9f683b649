"""Record, per rank and epoch, which sample indices a Hugging Face ``Trainer`` run trained, for
``composer-sampling audit``: the trainer's events mapped onto the shared ledger recording (``_ledger/``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from composer_sampling._ledger.attempt import open_attempt, record_trained
from composer_sampling._ledger.batch_indices import IndexKey, key_name, valid_index_key
from composer_sampling._ledger.lineage import Lineage
from composer_sampling._ledger.recorder import LedgerRecorder
from composer_sampling._ledger.sources import IndexSource
from composer_sampling._resume.ranks import torch_ranks
from composer_sampling.errors import DataOrderError
from composer_sampling.ledger_format import object_store_scheme
from composer_sampling.transformers._ledger_wiring import Source, tap_placed, tap_unplaced, wire_ledger
from composer_sampling.transformers._loop import batches_before, batches_of, resume_place, steps_per_epoch
from composer_sampling.transformers._state_files import LEDGER, read_state, write_state
from composer_sampling.transformers._wiring import ATTACHED, is_trainer

__all__ = ['SampleLedger']


class SampleLedger(TrainerCallback):
    """Writes the sample indices of every batch that a Hugging Face ``Trainer`` trains to one file per rank, for
    ``audit``.

    The files have the format of the Composer and Lightning ledgers, and ``composer-sampling audit FOLDER``
    reads them alike. Attach the ledger with :meth:`attach`, which wraps a few methods of that one trainer
    (never of its class). The indices come from a tap at the top of the train loader, matched in order to
    the batches that trained, every micro batch of an optimizer step included: on the loader that the
    trainer's ``SamplerSync`` placed, else on the loader that ``get_train_dataloader`` returns.

    Each rank numbers its batches as the Trainer's loop counts them: batch ``b`` of epoch ``e`` is batch
    ``e x batches_in_epoch + b``. Records are written before every checkpoint, at every epoch's end and
    when ``train`` returns or raises. Every rank writes the lineage, the attempt and the last batch into
    the checkpoint folder as ``sample_ledger_{rank}.pt``, so a fit resumed with
    ``train(resume_from_checkpoint=...)`` writes a new attempt's files that continue the lineage there.

    Args:
        folder (str | os.PathLike): the local folder of the files ``{attempt}-rank{r}.bin``.
        index_key (str | int | Callable, optional): read the indices from each batch (a mapping key, a
            position in a tuple or list batch, or a callable ``batch -> indices``) instead of the sampler
            graph. Default: ``None``.

    Example:
        >>> from transformers import Trainer, TrainingArguments  # doctest: +SKIP
        >>> trainer = SamplerSync().attach(Trainer(model, TrainingArguments('out'),  # doctest: +SKIP
        ...                                        train_dataset=dataset))
        >>> trainer = SampleLedger('out/ledger').attach(trainer)  # doctest: +SKIP
        >>> trainer.train()  # then: composer-sampling audit out/ledger  # doctest: +SKIP
    """

    def __init__(self, folder: str | os.PathLike[str], *, index_key: IndexKey | None = None) -> None:
        if not isinstance(folder, (str, os.PathLike)) or not str(folder):
            raise TypeError(f'folder must be a local path (the folder of the ledger files), got {folder!r}')
        if object_store_scheme(str(folder)) is not None:
            raise ValueError(f'folder must be a local path, got the URI {folder!r}: the Hugging Face SampleLedger '
                             'writes local files; copy the folder to the object store after the run')
        self.folder = str(folder)
        self.index_key = valid_index_key(index_key)
        self._lineage = Lineage()
        self._indices = IndexSource(self.index_key, f'SampleLedger(index_key={key_name(self.index_key)})')
        self._recorder: LedgerRecorder | None = None  # the file of the current fit
        self._trainer: Any = None
        self._checkpoint: str | None = None  # the folder the fit in progress resumed from
        self._source: Source | None = None  # the loader tapped in get_train_dataloader, without SamplerSync
        self._fit = False  # whether a train() is in progress
        self._skipped = False  # the trainer drew and dropped the trained batches of the resumed epoch
        self._batches, self._accumulate, self._epoch = 0, 1, 0

    def __repr__(self) -> str:
        return f'SampleLedger(folder={self.folder!r}, index_key={self.index_key!r})'

    def attach(self, trainer: Any) -> Any:
        """Attach to ``trainer`` (a ``transformers.Trainer`` or a subclass): wrap the methods of this instance that
        the ledger needs, and add the callback; the trainer.

        Raises:
            TypeError: ``trainer`` is not a ``transformers.Trainer``.
            DataOrderError: this ledger is attached to another trainer, or another ledger to this trainer.
        """
        if not is_trainer(trainer):
            raise TypeError(f'SampleLedger.attach expects a transformers.Trainer (or a subclass), got '
                            f'{type(trainer).__name__}')
        if self._trainer is not None and self._trainer is not trainer:
            raise DataOrderError('SampleLedger is attached to another Trainer already; create one SampleLedger for '
                                 'each Trainer')
        wire_ledger(trainer, self)
        if not any(callback is self for callback in trainer.callback_handler.callbacks):
            trainer.add_callback(self)
        self._trainer = trainer
        return trainer

    # the trainer's methods (see _ledger_wiring.py) ----------------------------------------------------------

    def train_starts(self, checkpoint: str | None) -> None:
        """``train()`` is called, resuming from the checkpoint ``checkpoint`` (None: a fresh fit)."""
        self.train_ended()
        self._recorder, self._source, self._skipped, self._fit = None, None, False, True
        self._checkpoint = checkpoint
        state = None if checkpoint is None else read_state(checkpoint, torch_ranks().rank, LEDGER)
        if state is None:
            self._lineage.restart()  # a fresh run, or a checkpoint saved without the ledger: a new lineage
        else:
            self._lineage.load_state_dict(state)

    def loader_built(self, prepared: Any) -> Any:
        """The trainer built its train loader: without ``SamplerSync``, tap it here, before it is iterated."""
        if vars(self._trainer).get(ATTACHED) is not None:
            return prepared  # tapped at the first epoch, once SamplerSync has placed it
        prepared, self._source = tap_unplaced(prepared, self._indices.tell)
        return prepared

    def resumed(self, skipped: bool) -> None:
        """The trainer resumes an epoch; ``skipped``: it draws and drops the index lists of its trained batches."""
        self._skipped = skipped

    def batch_trained(self, inputs: Any) -> None:
        """The trainer has trained the batch ``inputs``: record it as the next batch."""
        if self._recorder is not None and self._lineage.batch is not None:
            record_trained(self._recorder, self._lineage, self._indices, self._lineage.batch + 1, self._epoch,
                           inputs, self._skipped)

    def checkpoint_saving(self) -> None:
        """The trainer is about to save a checkpoint (or ends an epoch): every batch recorded is written first."""
        if self._recorder is not None:
            self._recorder.flush()

    def checkpoint_saved(self, folder: str) -> None:
        """The trainer saved a checkpoint into ``folder`` on every rank: this rank writes the ledger's state there."""
        write_state(folder, torch_ranks().rank, self._lineage.state_dict(), LEDGER)

    def train_ended(self) -> None:
        """``train()`` returned or raised: write what is held, close the file and stop listening to the tap."""
        if self._recorder is not None:
            self._recorder.close()
        self._indices.end()
        self._fit = False

    # hooks ----------------------------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._trainer is None:
            raise DataOrderError(
                'SampleLedger was given in callbacks=[...] without attach: a TrainerCallback cannot reach the train '
                'loader, the batches of a micro step or the checkpoint folder. Build the trainer with '
                'trainer = SampleLedger(folder).attach(Trainer(...)), which adds the callback itself')

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._fit and self._recorder is None:
            self._start(args, state, kwargs['train_dataloader'])
        if self._recorder is not None:
            self._epoch = state.global_step // steps_per_epoch(self._batches, self._accumulate)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.checkpoint_saving()

    def _start(self, args: Any, state: Any, prepared: Any) -> None:
        """Tap the loader SamplerSync placed, where there is one, and open the fit's file."""
        sync = vars(self._trainer).get(ATTACHED)
        source = self._source if sync is None else tap_placed(prepared, sync.data_order, self._indices.tell)
        assert source is not None, 'get_train_dataloader tapped the loader'
        loader, graph, tap = source
        self._batches, self._accumulate = batches_of(prepared, args), int(args.gradient_accumulation_steps)
        place = resume_place(state.global_step, self._batches, self._accumulate)
        inside = self._checkpoint is not None and 0 < place.batches < self._batches
        self._indices.start(loader, graph, None, lambda listener: tap, place.batches if inside else 0)
        self._recorder = open_attempt(self._lineage, self._indices, lambda attempt: Path(self.folder), torch_ranks(),
                                      loader, graph, start_batch=batches_before(place, self._batches),
                                      start_epoch=place.epoch)
