"""Where Lightning's fit loop stands: at a checkpoint, and where it resumes after one.

Lightning keeps its place in the progress counters of its loops (``fit_loop.epoch_progress``
and ``fit_loop.epoch_loop.batch_progress``), saves them in every checkpoint and, at a
resume, adjusts them in ``fit_loop.reset()`` and ``epoch_loop.reset()``. Those run after
the train loader was built, placed and iterated once, so the Lightning SamplerSync reads
the restored counters and works out where the loops will resume, the way those two
methods do in Lightning 2.6:

* a checkpoint saved at a batch's end (``ModelCheckpoint(every_n_train_steps=...)``)
  resumes at the next batch, or at the next epoch's first batch after the epoch's last;
* one saved at the epoch's end, or in a validation run at the epoch's last batch,
  resumes at the end of that epoch: Lightning may still draw one more batch there,
  which the placed loader does not have, so the next batch trained is the next
  epoch's first;
* one that loaded its counters after the epoch ended (a fit run by ``max_epochs``)
  resumes at the next epoch's first batch;
* one saved at the end of a fit that ``max_steps`` stopped inside an epoch resumes
  inside that epoch, but Lightning gives the samplers the next epoch there.

:func:`saved_place` is what a checkpoint records; :func:`resume_place` where the loop
continues. The callback checks its own saved place against the loop's, and checks the
first batch the loop trains against what it placed.

"""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._resume.place import Place

__all__ = ['batches_in_epoch_of', 'epochs_disagree', 'resume_place', 'saved_place', 'warn_between_steps']


def saved_place(trainer: Any) -> tuple[Place, bool]:
    """Where the fit stands now, for a checkpoint: the place after the batches trained, and whether the epoch ended."""
    loop = trainer.fit_loop
    epochs = loop.epoch_progress.current
    return Place(trainer.current_epoch, loop.epoch_loop.batch_progress.current.processed), \
        epochs.processed > epochs.completed


def resume_place(trainer: Any, batches_in_epoch: float) -> tuple[Place, int]:
    """Where the fit loop continues, read from its counters before its ``reset()`` adjusts them, and the epoch it
    gives the samplers there (``set_epoch``; another epoch only where Lightning contradicts itself).

    A place whose batches reach ``batches_in_epoch`` is the epoch's end. A fit that
    restored no checkpoint starts at its current epoch's first batch.
    """
    loop = trainer.fit_loop
    epoch_loop = loop.epoch_loop
    epochs, batches = loop.epoch_progress, epoch_loop.batch_progress
    completed, processed = epochs.current.completed, epochs.current.processed
    if not loop.restarting:  # a new fit, or one whose counters were loaded after its epoch ended
        return Place(processed, 0), processed
    on_batch_end = _gaps(batches.total) == _AT_BATCH_END
    if _gaps(epochs.total) == _AT_EPOCH_START:
        processed = completed
    if on_batch_end and batches.is_last_batch:
        if _gaps(epochs.total) == _IN_EPOCH:
            processed, completed = processed + 1, completed + 1
        elif not epoch_loop.val_loop.batch_progress.is_last_batch:
            completed += 1
    epoch = completed if trainer.max_steps != -1 else processed
    trained = batches.current.completed
    if on_batch_end:
        trained += 1
        if trained >= batches_in_epoch:  # Lightning starts the next epoch from its first batch
            trained = 0
    return Place(epoch, trained), processed  # Lightning's set_epoch takes the processed epochs


#: The gaps of a progress total (see :func:`_gaps`) where Lightning's restart stages look for them: a checkpoint saved
#: at a batch's end, at an epoch's start, and inside an epoch.
_AT_BATCH_END = (0, 0, 1)
_AT_EPOCH_START = (1, 0, 0)
_IN_EPOCH = (0, 1, 0)


def _gaps(progress: Any) -> tuple[int, int, int]:
    """How far each counter of a Lightning progress total is behind the one before: ready to started, started to
    processed, processed to completed."""
    return progress.ready - progress.started, progress.started - progress.processed, \
        progress.processed - progress.completed


def epochs_disagree(place: Place, sampler_epoch: int) -> str:
    """The refusal of a place where Lightning gives the samplers another epoch than the one it resumes."""
    return (f'SamplerSync: the checkpoint was saved when max_steps stopped the fit inside epoch {place.epoch}, after '
            f'{place.batches} batches; Lightning resumes the rest of epoch {place.epoch} but gives the samplers epoch '
            f'{sampler_epoch}, so the rest of the epoch would be drawn in another order. Resume from the checkpoint '
            "ModelCheckpoint(every_n_train_steps=...) saved at that step, or from one saved at an epoch's end")


def warn_between_steps(trainer: Any, place: Place, done: bool) -> None:
    """Warn when a checkpoint is saved between two optimizer steps: its resume will be refused."""
    accumulate = int(getattr(trainer, 'accumulate_grad_batches', 1) or 1)
    batches = getattr(trainer, 'num_training_batches', float('inf'))
    if not done and 0 < place.batches < batches and place.batches % accumulate:
        warnings.warn(f'SamplerSync: a checkpoint is saved at {place}, between two optimizer steps '
                      f'(accumulate_grad_batches={accumulate}); it holds no accumulated gradients, so SamplerSync '
                      'will refuse to resume from it. Save at optimizer steps '
                      '(ModelCheckpoint(every_n_train_steps=...))', stacklevel=3)


def batches_in_epoch_of(loader: DataLoader, trainer: Any) -> float:
    """The batches of an epoch of ``loader`` as Lightning counts them (``limit_train_batches`` applied; infinite when
    the loader has no length)."""
    try:
        length: float = len(loader)
    except TypeError:
        return float('inf')
    limit = getattr(trainer, 'limit_train_batches', None)
    if isinstance(limit, int) and not isinstance(limit, bool):
        return min(length, limit)
    if isinstance(limit, float) and limit < 1.0:
        return int(length * limit)
    return length
