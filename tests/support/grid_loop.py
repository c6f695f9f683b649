"""The loop runner of the resume grid (``grid.py``): a row trained by a loop written by hand on ``DataOrder``, one
process or every rank of a torchrun launch (gloo, ``DistributedDataParallel``).

The loop is the dozen lines of docs/data-order.md: ``set_epoch`` at every epoch,
iteration over the order, and a checkpoint holding the model, the optimizer, the step
and ``DataOrder.state_dict()`` (gathered on every rank, written by rank 0). The run
that never stopped writes one at each stop: after the stop's step, inside the
epoch's pass, or after the pass at the epoch boundary. A resume builds everything
again, loads the checkpoint and continues at ``order.epoch``. The run's length is a
number of epochs, or of steps, as the row's duration says. Nothing here imports
Composer or Lightning.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
import torch.distributed as torch_dist
import torch.nn.functional as F  # noqa: N812

from composer_sampling import DataOrder

from support.grid import LEARNING_RATE, LOADERS, SEED, Outcome, Row, data_of, data_parallel, network, resume_row, world


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def fit(row: Row, folder: Path, *, load: Path | None = None, save: dict[str, int] | None = None) -> Outcome:
    """Train ``row`` to its end on this rank (``save``: write the stops' checkpoints; ``load``: resume)."""
    assert row.composer_only is None, row.composer_only
    _seed_everything(SEED)
    data, counted = data_of(row)
    loader = LOADERS[row.sampler](data, *data_parallel(row), row.workers)
    net = network(row.dropout)
    distributed = torch_dist.is_available() and torch_dist.is_initialized()
    model: torch.nn.Module = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    order = DataOrder(loader, data_seed=SEED)
    step, batches = 0, []
    if load is not None:
        saved = torch.load(load, weights_only=True)
        net.load_state_dict(saved['model'])
        optimizer.load_state_dict(saved['optimizer'])
        order.load_state_dict(saved['data_order'])
        step = saved['step']
    save = save or {}
    total = row.epochs * len(loader)

    def checkpoint(kind: str) -> None:
        state = {'model': net.state_dict(), 'optimizer': optimizer.state_dict(), 'step': step,
                 'data_order': order.state_dict()}  # every rank: the order gathers every rank's RNG state
        if world()[1] == 0:
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(state, checkpoint_file(folder, step, kind))
        if distributed:
            torch_dist.barrier()

    epoch = order.epoch
    while epoch < row.epochs if row.duration == 'epochs' else step < total:
        order.set_epoch(epoch)
        for batch in order:
            model.train()
            loss = F.cross_entropy(model(batch['input']), batch['target'])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            batches.append((epoch, batch['index'].tolist()))
            for kind in (kind for kind, at in save.items() if at == step and kind != 'boundary'):
                checkpoint(kind)
            if row.duration == 'steps' and step == total:
                break
        if save.get('boundary') == step:
            checkpoint('boundary')
        epoch += 1
    weights = {name: tensor.detach().clone() for name, tensor in net.state_dict().items()}
    return Outcome(weights, optimizer.state_dict(), batches, counted.read_counts())


def checkpoint_file(folder: Path, batch: int, kind: str) -> Path:
    """The checkpoint the stop ``kind`` wrote after ``batch`` steps."""
    return folder / f'{kind}-step{batch}.pt'


def run_row(row: Row, folder: Path) -> list[str]:
    """Train ``row`` whole and from each of its stops in ``folder`` (the same on every rank); what differs."""
    return resume_row(row, folder / str(row), fit, checkpoint_file)
