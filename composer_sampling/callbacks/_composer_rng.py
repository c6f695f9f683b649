"""The checkpoint's RNG state, restored where Composer's spin would have restored it.

Composer keeps the RNG state of a loaded checkpoint in the private
``Trainer._rng_state`` and restores it only inside its dataloader spin, just before
batch ``k + 1`` of a resumed epoch, or at fit start when the epoch had not begun.
When the spin is skipped (by :class:`~composer_sampling.SamplerSync`, or by Composer
itself for a dataset that resumes itself, such as a ``StreamingDataset``), nothing
restores it. A callback sees only ``State``, so :class:`CheckpointRNG` keeps its
own copy: every rank's RNG state, gathered when the callback's state is taken for
a checkpoint (Composer takes it on every rank, right before it gathers its own
``'rng'``, so the two copies are the same state), and restored at the first
``BEFORE_DATALOADER`` of the resumed fit: after ``iter(dataloader)``, before the
first ``next()``, as the spin would. Nothing is captured at a batch that writes no
checkpoint.

Composer still holds its own copy afterwards and restores it at the start of a
later ``fit()`` of the same trainer that begins at a batch boundary. That restore is
undone at the following ``EPOCH_START`` by setting back the state the fit started
with, which is exact unless something draws from the RNG in between (Composer's
spin of the evaluation dataloaders); then a warning says so.
"""

from __future__ import annotations

import random
import sys
import warnings
import weakref
from typing import Any

import numpy as np
import torch
from composer.core import State
from composer.utils import dist, reproducibility

__all__ = ['CheckpointRNG']


class CheckpointRNG:
    """Captures, saves and restores the RNG state of every rank for :class:`~composer_sampling.SamplerSync`."""

    def __init__(self) -> None:
        self._state: weakref.ref[State] | None = None  # the trainer's state since the first fit start
        self._loaded: list[dict[str, Any]] | None = None  # from the checkpoint, until restored
        self._loaded_batch: int | None = None
        self._composer_holds = False  # Composer's Trainer holds the loaded checkpoint's RNG, not yet restored
        self._composer_stale = False  # ...and a fit has moved past the point it belongs to
        self._pending = False
        self._undo_stale: tuple[Any, Any, torch.Tensor] | None = None
        self._warned: set[str] = set()

    # checkpoint state ---------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Every rank's RNG state now, and the batch it belongs to: a collective once a fit has started.

        Composer takes the callbacks' states on every rank when it saves a checkpoint,
        right before it gathers its own ``'rng'`` (nothing draws in between), so this
        copy is the state Composer saves. Before any fit there is nothing to save.
        """
        state = None if self._state is None else self._state()
        if state is None:
            return {'rng': None, 'rng_batch': None}
        return {'rng': reproducibility.get_rng_state(), 'rng_batch': int(state.timestamp.batch)}

    def load(self, state: dict[str, Any]) -> None:
        """Take the RNG copy of a loaded SamplerSync state (absent in versions before 3)."""
        rng, batch = state.get('rng'), state.get('rng_batch')
        if isinstance(rng, tuple):  # version 4
            rng = list(rng)
        if rng is not None and not (isinstance(rng, list) and all(isinstance(item, dict) for item in rng)):
            raise TypeError(f'SamplerSync state rng must be a list of dicts (one per rank) or None, got {rng!r:.100}')
        kept = _checkpoint_keeps_rng()
        self._composer_holds = kept is not False
        self._composer_stale = False
        if kept is False:  # load_ignore_keys dropped the checkpoint's 'rng': drop our copy too
            rng = None
        self._loaded = rng
        self._loaded_batch = None if batch is None else int(batch)

    # events -------------------------------------------------------------------------------------------

    def watch(self, state: State | None) -> None:
        """At fit start, the trainer's state (a checkpoint's copy is taken at its timestamp); at ``INIT``, None.

        A new trainer's checkpoint load may ask for the state before its first fit
        (a sharded load fills it in place): it gets none, whatever fits an earlier
        trainer ran with this callback.
        """
        self._state = None if state is None else weakref.ref(state)

    def fit_start(self, state: State, spin_skipped: bool) -> None:
        """Decide whether this fit restores the checkpoint's RNG, or undoes Composer's stale restore."""
        self._pending = False
        self._undo_stale = None
        loaded, self._loaded = self._loaded, None
        if int(state.timestamp.batch_in_epoch) == 0:
            # Composer restores the copy it holds right after FIT_START, and forgets it.
            if self._composer_holds and self._composer_stale:
                self._undo_stale = _local_state()
                if state.evaluators:
                    self._warn('later-fit',
                               'SamplerSync: this fit starts at an epoch boundary after a resume whose RNG state '
                               'SamplerSync restored; Composer restores that old state again, and SamplerSync sets '
                               'back the state this fit started with, but the evaluation dataloaders Composer spins '
                               'in between draw from it, so this fit is not bit-exact. Build a new Trainer (with '
                               'load_path) for each fit to keep it exact')
            self._composer_holds = self._composer_stale = False
            return
        if not spin_skipped:
            self._composer_holds = False  # Composer's spin restores it (and forgets it)
            return
        self._composer_stale = self._composer_holds
        if loaded is None:
            return
        if self._loaded_batch is not None and self._loaded_batch != int(state.timestamp.batch):
            self._warn('batch', f'SamplerSync: its copy of the RNG state is from batch {self._loaded_batch}, the '
                                f'checkpoint from batch {int(state.timestamp.batch)}, so the RNG state is not '
                                'restored and dropout or augmentations differ from the run that never stopped. '
                                'SamplerSync copies the RNG state when Composer saves, so a copy from another batch '
                                'means the checkpoint was edited, or written by an older composer-sampling with '
                                'SamplerSync after the CheckpointSaver')
            return
        if len(loaded) != dist.get_world_size():
            self._warn('world', f'SamplerSync: the checkpoint holds the RNG states of {len(loaded)} ranks and this '
                                f'run has {dist.get_world_size()}, so the RNG state cannot be restored: random '
                                'augmentations and dropout continue from a new state (the samples are the same)')
            return
        self._loaded = loaded
        self._pending = True

    def before_dataloader(self) -> None:
        """Restore this rank's state of the checkpoint, once, where Composer's spin would have."""
        if not self._pending:
            return
        assert self._loaded is not None
        reproducibility.load_rng_state(self._loaded)
        self._pending = False
        self._loaded = None

    def epoch_start(self) -> None:
        """Undo Composer's restore of a state it should no longer hold (see :meth:`fit_start`)."""
        if self._undo_stale is not None:
            _set_local_state(self._undo_stale)
            self._undo_stale = None

    def _warn(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(text, stacklevel=4)


def _local_state() -> tuple[Any, Any, torch.Tensor]:
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _set_local_state(saved: tuple[Any, Any, torch.Tensor]) -> None:
    python, numpy, cpu = saved
    random.setstate(python)
    np.random.set_state(numpy)
    torch.set_rng_state(cpu)


def _checkpoint_keeps_rng() -> bool | None:
    """Whether the checkpoint Composer is loading (this call happens inside it) kept its ``'rng'`` entry.

    ``load_ignore_keys=['rng']`` removes it before the callbacks' states are loaded;
    then Composer restores no RNG and neither may we. The loaded dictionary is a
    local variable of the function in ``composer.utils.checkpoint`` that loads it;
    None when no such frame is found (a direct call, or a Composer that loads
    differently), and the copy is then kept.
    """
    frame = sys._getframe(1)
    for _ in range(12):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return None
        if frame.f_globals.get('__name__') != 'composer.utils.checkpoint':
            continue
        loaded = frame.f_locals.get('state_dict')
        if isinstance(loaded, dict) and isinstance(loaded.get('state'), dict):
            return 'rng' in loaded
    return None
