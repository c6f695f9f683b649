"""The ``Trainer`` methods the Hugging Face ``SamplerSync`` wraps, on the one trainer instance it is attached to.

A ``TrainerCallback`` only reads: its hooks get ``args``, ``state`` and ``control``,
never the trainer, and run after the train loader was built and its length taken.
What must change the loader, or see where a checkpoint goes, wraps a method of the
trainer *instance* (an attribute of the object, never of its class), as transformers
5.25 names them:

* ``train(resume_from_checkpoint=...)``: the checkpoint folder a fit resumes from
  (``True``: ``get_last_checkpoint(args.output_dir)``, as transformers resolves it);
* ``get_train_dataloader()``: the loader accelerate prepared, before its length is
  taken, so that a graph that shards by rank is not split again;
* ``get_resumed_dataloader(dataloader, num_batches)``: the loader of a resumed epoch,
  placed at the next sample instead of accelerate's ``skip_first_batches``;
* ``_save_checkpoint(model, trial)``: every rank writes its order state into the
  checkpoint folder it just saved (``<run dir>/checkpoint-<global_step>``);
* ``_get_train_sampler``, only where a subclass defines it without the dataset
  argument transformers 5 passes (VILA's ``_get_train_sampler(self)``): called without it.

Example:
    >>> ATTACHED
    '_composer_sampling_sampler_sync'
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

from composer_sampling.errors import DataOrderError

__all__ = ['ATTACHED', 'checkpoint_folder', 'has_resume_hook', 'is_trainer', 'saved_folder', 'wire']

#: The trainer instance's attribute that holds the SamplerSync attached to it.
ATTACHED = '_composer_sampling_sampler_sync'


def wire(trainer: Any, sync: Any) -> None:
    """Wrap the methods of ``trainer`` (this instance only) that hand ``sync`` the fit's events.

    ``sync`` receives ``train_starts(checkpoint folder or None)``, ``loader_built(loader)``
    (its return value replaces the loader), ``resumed_loader(loader, num_batches)`` (None:
    transformers' own skip) and ``checkpoint_saved(folder)``.
    """
    attached = vars(trainer).get(ATTACHED)
    if attached is not None and attached is not sync:
        raise DataOrderError(f'SamplerSync: this {type(trainer).__name__} has another SamplerSync attached already; '
                             'attach one SamplerSync to a trainer')
    if attached is sync:
        return
    setattr(trainer, ATTACHED, sync)
    own_train = trainer.train

    @functools.wraps(own_train)
    def train(resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        sync.train_starts(checkpoint_folder(trainer, resume_from_checkpoint))
        return own_train(resume_from_checkpoint, *args, **kwargs)

    own_loader = trainer.get_train_dataloader

    @functools.wraps(own_loader)
    def get_train_dataloader(*args: Any, **kwargs: Any) -> Any:
        return sync.loader_built(own_loader(*args, **kwargs))

    own_save = trainer._save_checkpoint

    @functools.wraps(own_save)
    def _save_checkpoint(model: Any, trial: Any, *args: Any, **kwargs: Any) -> None:
        own_save(model, trial, *args, **kwargs)
        sync.checkpoint_saved(saved_folder(trainer, trial))

    trainer.train, trainer.get_train_dataloader, trainer._save_checkpoint = train, get_train_dataloader, \
        _save_checkpoint
    own_resumed = getattr(trainer, 'get_resumed_dataloader', None)
    if own_resumed is not None:
        @functools.wraps(own_resumed)
        def get_resumed_dataloader(dataloader: Any, num_batches: int) -> Any:
            placed = sync.resumed_loader(dataloader, num_batches)
            return own_resumed(dataloader, num_batches) if placed is None else placed

        trainer.get_resumed_dataloader = get_resumed_dataloader
    own_sampler = trainer._get_train_sampler
    if not _takes_an_argument(own_sampler):
        @functools.wraps(own_sampler)
        def _get_train_sampler(train_dataset: Any = None) -> Any:
            return own_sampler()

        trainer._get_train_sampler = _get_train_sampler


def has_resume_hook(trainer: Any) -> bool:
    """Whether the trainer's transformers version has ``get_resumed_dataloader`` (5.x does; 4.x skips the trained
    batches with accelerate's ``skip_first_batches`` inside its loop, where nothing can place the loader)."""
    return callable(getattr(type(trainer), 'get_resumed_dataloader', None))


def is_trainer(obj: Any) -> bool:
    """Whether ``obj`` is a ``transformers.Trainer`` (a subclass's instance included)."""
    from transformers import Trainer

    return isinstance(obj, Trainer)


def saved_folder(trainer: Any, trial: Any) -> str:
    """The folder ``_save_checkpoint(model, trial)`` has just saved into: ``<run dir>/checkpoint-<global_step>``."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(trainer._get_output_dir(trial=trial), f'{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}')


def checkpoint_folder(trainer: Any, resume_from_checkpoint: Any) -> str | None:
    """The folder ``train(resume_from_checkpoint=...)`` loads, as transformers resolves it; None for a fresh fit."""
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is True:
        from transformers.trainer_utils import get_last_checkpoint

        found = get_last_checkpoint(trainer.args.output_dir)
        return None if found is None else str(found)  # None: transformers refuses it itself
    return os.fspath(resume_from_checkpoint)


def _takes_an_argument(method: Any) -> bool:
    """Whether a bound method accepts one positional argument."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD, parameter.VAR_POSITIONAL)
               for parameter in parameters)
