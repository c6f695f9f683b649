"""Where the Hugging Face training loop stands: at a checkpoint, and where it resumes after one.

transformers 5.25 keeps its place in one number, ``state.global_step`` (optimizer
steps). ``Trainer._inner_training_loop`` takes ``steps_in_epoch = len(train_dataloader)``
batches per rank per epoch, grouped ``gradient_accumulation_steps`` at a time into
``num_update_steps_per_epoch`` optimizer steps (the last step of an epoch takes the
remainder); at a resume, ``_init_training_state`` continues at epoch
``global_step // num_update_steps_per_epoch`` after
``(global_step % num_update_steps_per_epoch) * gradient_accumulation_steps`` batches.
A checkpoint saved at an epoch's last step therefore resumes at the next epoch's first
batch. The functions here compute the same numbers, so that the place the loader is
put at is the place the loop continues from.

Example:
    >>> steps_per_epoch(12, accumulate=4), resume_place(global_step=4, batches_in_epoch=12, accumulate=4)
    (3, Place(epoch=1, batches=4))
    >>> saved_place(global_step=3, batches_in_epoch=12, accumulate=4)
    (Place(epoch=0, batches=12), True)
    >>> batches_before(Place(epoch=1, batches=4), batches_in_epoch=12)
    16
"""

from __future__ import annotations

from typing import Any

from composer_sampling._resume.place import Place

__all__ = ['batch_in_epoch', 'batches_before', 'batches_of', 'resume_place', 'saved_place', 'steps_per_epoch']


def batches_of(loader: Any, args: Any) -> int:
    """``steps_in_epoch`` of transformers' ``set_initial_training_values``: the batches of an epoch of each rank, the
    loader's length, else (an iterable dataset without one) ``max_steps`` times the accumulation."""
    try:
        return len(loader)
    except TypeError:
        return int(args.max_steps) * int(args.gradient_accumulation_steps)


def steps_per_epoch(batches_in_epoch: int, accumulate: int) -> int:
    """``num_update_steps_per_epoch`` of transformers' ``set_initial_training_values``: the optimizer steps of an
    epoch, a last partial step included, at least one."""
    return max(batches_in_epoch // accumulate + int(batches_in_epoch % accumulate > 0), 1)


def resume_place(global_step: int, batches_in_epoch: int, accumulate: int) -> Place:
    """Where ``_init_training_state`` continues after ``global_step`` optimizer steps: the epoch and the batches of it
    each rank trained."""
    steps = steps_per_epoch(batches_in_epoch, accumulate)
    return Place(global_step // steps, global_step % steps * accumulate)


def saved_place(global_step: int, batches_in_epoch: int, accumulate: int) -> tuple[Place, bool]:
    """Where the loop stands after ``global_step`` optimizer steps, for a checkpoint: the place after the batches
    trained, and whether its epoch ended (a checkpoint at an epoch's last step)."""
    steps = steps_per_epoch(batches_in_epoch, accumulate)
    if global_step > 0 and global_step % steps == 0:
        return Place(global_step // steps - 1, batches_in_epoch), True
    return Place(global_step // steps, global_step % steps * accumulate), False


def batch_in_epoch(global_step: int, epoch: int, batches_in_epoch: int, accumulate: int) -> int:
    """The batch of ``epoch`` the loop trains next, at the start of an optimizer step after ``global_step`` steps."""
    return (global_step - epoch * steps_per_epoch(batches_in_epoch, accumulate)) * accumulate


def batches_before(place: Place, batches_in_epoch: int) -> int:
    """The batches each rank trained before ``place`` since the run started, counting every micro batch of an
    optimizer step: how a ledger numbers the batches of a Hugging Face run."""
    return place.epoch * batches_in_epoch + place.batches
