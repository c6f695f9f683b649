"""The ``Trainer`` methods the Hugging Face ``SampleLedger`` wraps, on the one trainer instance it is attached to.

A ``TrainerCallback`` never sees the trainer, the loader it iterates before the
iteration, the batch of a micro step, or the folder of a checkpoint. So the ledger wraps
these methods of the trainer *instance* (never of its class), as transformers 5.25
names them:

* ``train(resume_from_checkpoint=...)``: the checkpoint folder a fit resumes from, and
  the end of the fit, however it ends;
* ``get_train_dataloader()``: the loader the trainer iterates, which the ledger taps
  when no ``SamplerSync`` places it;
* ``get_resumed_dataloader(dataloader, num_batches)`` (5.x): whether the trainer draws
  and drops the index lists of the trained batches of a resumed epoch (accelerate's
  ``skip_first_batches``), or iterates a loader that was placed after them;
* ``training_step(model, inputs, ...)``: each batch the trainer has trained, every micro
  batch of an optimizer step included;
* ``_save_checkpoint(model, trial)``: the ledger is written before the checkpoint, and
  its state into the checkpoint folder after it.

The tap goes on the torch loader inside accelerate's ``DataLoaderShard`` (or on the loader
itself, where accelerate did not prepare it): :func:`tap_unplaced` in ``get_train_dataloader``
without ``SamplerSync``, :func:`tap_placed` on the loader that ``SamplerSync`` placed.

Example:
    >>> LEDGER_ATTACHED
    '_composer_sampling_sample_ledger'
"""

from __future__ import annotations

import functools
from typing import Any

from composer_sampling._graph.index_tap import Listener
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._ledger.see_through import tap_seen_through
from composer_sampling._ledger.sources import Tap, order_graph, tap_loader
from composer_sampling.errors import DataOrderError
from composer_sampling.transformers._accelerate import base_loader, replace_base
from composer_sampling.transformers._wiring import checkpoint_folder, saved_folder

__all__ = ['LEDGER_ATTACHED', 'Source', 'tap_placed', 'tap_unplaced', 'wire_ledger']

#: The trainer instance's attribute that holds the SampleLedger attached to it.
LEDGER_ATTACHED = '_composer_sampling_sample_ledger'
#: Where the ledger reads the index lists: the torch train loader, its graph, and the tap on its top.
Source = tuple[Any, GraphSnapshot | None, Tap | None]


def wire_ledger(trainer: Any, ledger: Any) -> None:
    """Wrap the methods of ``trainer`` (this instance only) that hand ``ledger`` the fit's events.

    ``ledger`` receives ``train_starts(checkpoint folder or None)``, ``train_ended()``,
    ``loader_built(loader)`` (its return value replaces the loader), ``resumed(skipped)``,
    ``batch_trained(inputs)``, ``checkpoint_saving()`` and ``checkpoint_saved(folder)``.
    """
    attached = vars(trainer).get(LEDGER_ATTACHED)
    if attached is not None and attached is not ledger:
        raise DataOrderError(f'SampleLedger: this {type(trainer).__name__} has another SampleLedger attached already; '
                             'attach one SampleLedger to a trainer (its folder holds every rank\'s files)')
    if attached is ledger:
        return
    setattr(trainer, LEDGER_ATTACHED, ledger)
    own_train, own_loader, own_step, own_save = (trainer.train, trainer.get_train_dataloader, trainer.training_step,
                                                 trainer._save_checkpoint)

    @functools.wraps(own_train)
    def train(resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        ledger.train_starts(checkpoint_folder(trainer, resume_from_checkpoint))
        try:
            return own_train(resume_from_checkpoint, *args, **kwargs)
        finally:
            ledger.train_ended()

    @functools.wraps(own_loader)
    def get_train_dataloader(*args: Any, **kwargs: Any) -> Any:
        return ledger.loader_built(own_loader(*args, **kwargs))

    @functools.wraps(own_step)
    def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        loss = own_step(model, inputs, *args, **kwargs)
        ledger.batch_trained(inputs)
        return loss

    @functools.wraps(own_save)
    def _save_checkpoint(model: Any, trial: Any, *args: Any, **kwargs: Any) -> None:
        ledger.checkpoint_saving()
        own_save(model, trial, *args, **kwargs)
        ledger.checkpoint_saved(saved_folder(trainer, trial))

    trainer.train, trainer.get_train_dataloader, trainer.training_step, trainer._save_checkpoint = (
        train, get_train_dataloader, training_step, _save_checkpoint)
    own_resumed = getattr(trainer, 'get_resumed_dataloader', None)
    if own_resumed is not None:
        @functools.wraps(own_resumed)
        def get_resumed_dataloader(dataloader: Any, num_batches: int) -> Any:
            resumed = own_resumed(dataloader, num_batches)
            ledger.resumed(skipped=resumed is not dataloader)
            return resumed

        trainer.get_resumed_dataloader = get_resumed_dataloader


def tap_unplaced(prepared: Any, listener: Listener) -> tuple[Any, Source]:
    """Tap the train loader ``prepared`` that ``get_train_dataloader`` built, where no order object places it.

    The tap is a :class:`~composer_sampling._ledger.see_through.SeeThroughTap`, so the ``set_epoch`` calls of
    accelerate and of the Trainer reach the samplers they reach without it. Returns the loader the trainer must
    iterate (``prepared``, whose torch loader was replaced, or the new loader where accelerate did not prepare
    it), and the torch loader, its graph before the tap, and the tap (None for a loader that is not a torch
    ``DataLoader``).
    """
    inner = base_loader(prepared)
    loader = prepared if inner is None else inner
    graph = order_graph(None, loader)
    tap, rebuilt = tap_seen_through(loader, listener)
    if rebuilt is not None and inner is None:
        return rebuilt, (rebuilt, graph, tap)
    if rebuilt is not None:
        replace_base(prepared, rebuilt)
    return prepared, (loader, graph, tap)


def tap_placed(prepared: Any, order: Any, listener: Listener) -> Source:
    """The torch loader inside ``prepared`` that the ``DataOrder`` ``order`` placed, its graph, and the tap on its
    top, telling ``listener``; a new loader built around the tap replaces the one inside accelerate's.

    Raises:
        DataOrderError: the tap needs a new loader, and accelerate did not prepare ``prepared``.
    """
    inner = base_loader(prepared)
    loader = prepared if inner is None else inner
    graph = order_graph(order, loader)
    if graph is None or not graph.map_style:
        return loader, graph, None  # the ledger then reads the batch, with index_key
    tap, rebuilt = tap_loader(loader, graph, listener)
    if rebuilt is not None and inner is None:
        raise DataOrderError(
            'SampleLedger: get_train_dataloader returned a DataLoader that accelerate did not prepare, and its batch '
            'sampler needs a tap on top that only a new loader can hold; return self.accelerator.prepare(loader) '
            'from get_train_dataloader, or pass SampleLedger(index_key=...)')
    if rebuilt is not None:
        replace_base(prepared, rebuilt)
    return loader, graph, tap
