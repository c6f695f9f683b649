"""The resume decision carried out at fit start: offsets and windows set, Composer's spin switched off or kept."""

from __future__ import annotations

import logging

from composer.core import State
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling._graph.index_tap import IndexTap, install_tap
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._graph.walk import describe
from composer_sampling._resume.decide import Continuation, Layout, Position, ResumeRefusedError, continuation
from composer_sampling._resume.top_tap import top_tap
from composer_sampling.protocols import is_offsettable

__all__ = ['current_layout', 'resume_in_epoch']

log = logging.getLogger('composer_sampling.callbacks.sampler_sync')  # SamplerSync's own logger


def current_layout(graph: GraphSnapshot, replication: int) -> Layout:
    """The layout this fit trains with: the distinct global batch and the data-parallel ranks."""
    ranks = max(dist.get_world_size() // replication, 1)
    size = graph.device_batch()
    return Layout(None if size is None else size * ranks, ranks)


def resume_in_epoch(state: State, graph: GraphSnapshot, saved: Layout | None, now: Layout, replication: int,
                    undo: bool) -> bool:
    """Continue the epoch at the next sample without Composer's spin where the decision allows.

    ``saved`` is the checkpoint's layout and ``replication`` its replication (or this run's);
    ``undo``: an earlier fit of this trainer set ``dataset_resumption['train']``, to decide
    afresh. Returns whether this fit set it (the next fit's ``undo``); raises
    :class:`~composer_sampling._resume.decide.ResumeRefusedError` for a resume that cannot
    continue exactly.
    """
    if undo:
        state.dataset_resumption.pop('train', None)
    loader, root = graph.loader, graph.root
    for node in graph.active:  # no offset or window of an earlier fit (reset_time, ...) survives
        if is_offsettable(node):
            node.set_sample_in_epoch(0)
        elif isinstance(node, IndexTap):
            node.set_window(0)
    position = Position(int(state.timestamp.batch_in_epoch), int(state.timestamp.sample_in_epoch) // replication,
                        int(state.dataloader_len) if _is_subset(state, loader) else None)
    saved = _saved_layout(saved, position)
    try:
        chosen = continuation(loader, position, saved, now, graph=graph)
    except ResumeRefusedError as error:
        raise ResumeRefusedError(f'SamplerSync: {error}') from None
    if chosen.kind in ('window', 'offset') and chosen.edge is None and (chosen.skip or chosen.limit is not None):
        tap = top_tap(state, graph)
        if tap is None:
            chosen = Continuation('spin', reason=f'{describe(root)} is the top of a {type(loader).__name__}, which '
                                                 'SamplerSync cannot rebuild')
        else:
            tap.set_window(chosen.skip * tap.group, None if chosen.limit is None else chosen.limit * tap.group)
    elif chosen.edge is not None:
        parent, attribute = chosen.edge
        install_tap(parent, attribute).set_window(chosen.skip, chosen.limit)
    if chosen.kind == 'spin':
        _keep_spin(chosen, position, saved, now)
        return False
    if chosen.kind == 'offset':
        for node in graph.active:
            if is_offsettable(node):
                node.set_sample_in_epoch(chosen.offset)
    if (position.batches or int(state.timestamp.epoch)) and 'train' not in state.dataset_resumption:
        state.dataset_resumption['train'] = True  # nothing to spin: every sampler is placed
        return True
    return False


def _keep_spin(chosen: Continuation, position: Position, saved: Layout | None, now: Layout) -> None:
    if position.batches == 0:
        return
    if saved is not None and saved.global_batch not in (None, now.global_batch):
        raise ResumeRefusedError(
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


def _saved_layout(saved: Layout | None, position: Position) -> Layout | None:
    """The checkpoint's layout; a state before version 2 did not record its global batch, but the timestamp does.

    Mid-epoch every trained batch is whole, so the distinct samples trained over the
    batches trained is the global batch the checkpoint ran with.
    """
    if saved is None or saved.global_batch is not None or position.batches == 0 or position.samples % position.batches:
        return saved
    return Layout(position.samples // position.batches, saved.data_parallel_ranks)


def _is_subset(state: State, loader: DataLoader) -> bool:
    """Whether ``train_subset_num_batches`` cuts the epoch short (Composer islices each fresh iterator)."""
    if state.dataloader_len is None:
        return False
    try:
        return int(state.dataloader_len) < len(loader)
    except TypeError:
        return False
