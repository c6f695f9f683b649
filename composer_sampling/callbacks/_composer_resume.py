"""The resume decision carried out in a Composer fit: the graph placed, Composer's spin switched off or kept."""

from __future__ import annotations

import logging

from composer.core import State
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._resume.decide import Continuation, Layout, Position
from composer_sampling._resume.place import place_in_epoch, saved_layout
from composer_sampling._resume.ranks import Ranks
from composer_sampling.callbacks._top_tap import top_tap
from composer_sampling.errors import DataOrderError

__all__ = ['composer_ranks', 'resume_in_epoch']

log = logging.getLogger('composer_sampling.callbacks.sampler_sync')  # SamplerSync's own logger


def composer_ranks() -> Ranks:
    """This process's rank and world size as ``composer.utils.dist`` has them, and its object gather."""
    return Ranks(dist.get_world_size(), dist.get_global_rank(), dist.all_gather_object)


def resume_in_epoch(state: State, graph: GraphSnapshot, saved: Layout | None, now: Layout, replication: int,
                    undo: bool) -> bool:
    """Continue the epoch at the next sample without Composer's spin where the decision allows.

    ``saved`` is the checkpoint's layout and ``replication`` its replication (or this run's);
    ``undo``: an earlier fit of this trainer set ``dataset_resumption['train']``, to decide
    afresh. Returns whether this fit set it (the next fit's ``undo``); raises
    :class:`~composer_sampling._resume.decide.DataOrderError` for a resume that cannot
    continue exactly.
    """
    if undo:
        state.dataset_resumption.pop('train', None)
    position = Position(int(state.timestamp.batch_in_epoch), int(state.timestamp.sample_in_epoch) // replication,
                        int(state.dataloader_len) if _is_subset(state, graph.loader) else None)
    chosen = place_in_epoch(graph, position, saved, now, top=lambda: top_tap(state, graph))
    if chosen.kind == 'spin':
        _keep_spin(chosen, position, saved_layout(saved, position), now)
        return False
    if (position.batches or int(state.timestamp.epoch)) and 'train' not in state.dataset_resumption:
        state.dataset_resumption['train'] = True  # nothing to spin: every sampler is placed
        return True
    return False


def _keep_spin(chosen: Continuation, position: Position, saved: Layout | None, now: Layout) -> None:
    if position.batches == 0:
        return
    if saved is not None and saved.global_batch not in (None, now.global_batch):
        raise DataOrderError(
            f'SamplerSync: Composer would resume by skipping {position.batches} batches of the new global batch '
            f'{now.global_batch}, but the checkpoint trained them with {saved.global_batch} distinct '
            f'samples a step ({chosen.reason}); the rest of the epoch would repeat or skip samples. Resume with '
            f'global batch {saved.global_batch} (device batch x world size / replication), or give that sampler '
            'set_epoch so that SamplerSync resumes it without the spin',
        )
    log.warning(
        'SamplerSync: %s, so Composer will load and skip the %d batches already trained in this epoch. Give it '
        'set_epoch(epoch) if its order depends only on the epoch, and SamplerSync resumes it without loading them',
        chosen.reason, position.batches,
    )


def _is_subset(state: State, loader: DataLoader) -> bool:
    """Whether ``train_subset_num_batches`` cuts the epoch short (Composer islices each fresh iterator)."""
    if state.dataloader_len is None:
        return False
    try:
        return int(state.dataloader_len) < len(loader)
    except TypeError:
        return False
