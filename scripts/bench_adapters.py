"""What the Composer and Lightning ``SamplerSync`` cost a batch, in this tree and in an earlier one, side by side.

    git archive REF composer_sampling | tar -x -C /tmp/baseline
    .venv/bin/python scripts/bench_adapters.py --baseline /tmp/baseline [--rounds 7] [--steps 160]

Each round starts two processes per trainer, one importing ``composer_sampling`` from
this tree and one from ``--baseline`` (a folder holding an earlier release's package),
their order turned each round. Each process trains one fit of a real ``Trainer`` on one
CPU process: a small MLP at batch 64 over tensors in memory, through a
``ResumableDistributedSampler``, four epochs, with ``SamplerSync``. The callback's
**own time** is what its calls take where they run, per batch:

* Composer: every event Composer hands the callback at every batch (``run_event`` of the
  instance, Composer's dispatch into the callback included), each kind of event at its
  median, as often as it came; fit start and epoch starts are reported apart, per fit;
* Lightning: every hook Lightning calls on the instance at every batch, and apart, the
  placement of the loader (the wrapper of the strategy's ``process_dataloader``) and
  the epoch starts, per fit.

The table gives the medians over the rounds, and the ratio of this tree to the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_report import write_section

ROOT = Path(__file__).resolve().parent.parent
#: Composer's events of every batch.
BATCH_EVENTS = ('before_dataloader', 'after_dataloader', 'batch_start', 'before_train_batch', 'before_forward',
                'after_forward', 'before_loss', 'after_loss', 'before_backward', 'after_backward',
                'after_train_batch', 'batch_end', 'batch_checkpoint')
#: Lightning's hooks of every batch.
BATCH_HOOKS = ('on_train_batch_start', 'on_train_batch_end')


def _data(steps: int) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    size = steps * 64 // 4
    return TensorDataset(torch.randn(size, 64, generator=generator), torch.randint(0, 10, (size,),
                                                                                   generator=generator))


def _net() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def _timed(calls: dict[str, list[float]], key: str, handler: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return handler(*args, **kwargs)
        finally:
            calls.setdefault(key, []).append(time.perf_counter() - started)
    return run


def _per_batch(calls: dict[str, list[float]], keys: tuple[str, ...], batches: int) -> float:
    return sum(statistics.median(times) * len(times) for key, times in calls.items() if key in keys) / batches


def composer_fit(steps: int) -> dict[str, float]:
    """One Composer fit; the SamplerSync's own time per batch, and its fit and epoch starts per fit, in seconds."""
    import torch
    from composer import Trainer
    from composer.models import ComposerClassifier
    from torch.utils.data import DataLoader

    from composer_sampling import ResumableDistributedSampler, SamplerSync

    torch.set_num_threads(1)
    data = _data(steps)
    loader = DataLoader(data, batch_size=64, sampler=ResumableDistributedSampler(data, 1, 0))
    sync = SamplerSync(data_seed=3)
    calls: dict[str, list[float]] = {}
    run_event = sync.run_event
    sync.run_event = lambda event, state, logger: _timed(calls, str(event.value), run_event)(event, state, logger)
    trainer = Trainer(model=ComposerClassifier(_net(), num_classes=10), train_dataloader=loader, max_duration='4ep',
                      callbacks=[sync], device='cpu', progress_bar=False, log_to_console=False, seed=3)
    trainer.fit()
    batches = int(trainer.state.timestamp.batch)
    return {'batch': _per_batch(calls, BATCH_EVENTS, batches),
            'starts': sum(sum(calls.get(key, [])) for key in ('fit_start', 'epoch_start'))}


def lightning_fit(steps: int) -> dict[str, float]:
    """One Lightning fit; the SamplerSync's own time per batch, and its placement and epoch starts per fit."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader

    from composer_sampling import ResumableDistributedSampler
    from composer_sampling.lightning import SamplerSync

    torch.set_num_threads(1)

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            features, labels = batch
            return torch.nn.functional.cross_entropy(self.net(features), labels)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    pl.seed_everything(3, verbose=False)
    data = _data(steps)
    loader = DataLoader(data, batch_size=64, sampler=ResumableDistributedSampler(data, 1, 0))
    sync = SamplerSync()
    calls: dict[str, list[float]] = {}
    for hook in ('on_train_epoch_start', 'on_train_batch_start', 'on_train_batch_end', 'on_train_epoch_end',
                 '_place'):
        if hasattr(sync, hook):
            setattr(sync, hook, _timed(calls, hook, getattr(sync, hook)))
    trainer = pl.Trainer(max_epochs=4, callbacks=[sync], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, accelerator='cpu',
                         use_distributed_sampler=False)
    trainer.fit(Model(), loader)
    batches = trainer.global_step
    return {'batch': _per_batch(calls, BATCH_HOOKS, batches),
            'starts': sum(sum(calls.get(key, [])) for key in ('_place', 'on_train_epoch_start'))}


def _child(trainer: str, package: Path, steps: int) -> dict[str, float]:
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(package), str(Path(__file__).parent)]),
           'PYTHONWARNINGS': 'ignore', 'OMP_NUM_THREADS': '1'}
    result = subprocess.run([sys.executable, __file__, '--child', trainer, '--steps', str(steps)], env=env,
                            capture_output=True, text=True, check=True, cwd=package)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--baseline', type=Path, help='a folder holding an earlier composer_sampling package')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=160, help='batches of a fit (four epochs)')
    parser.add_argument('--child', choices=('composer', 'lightning'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps((composer_fit if args.child == 'composer' else lightning_fit)(args.steps)))
        return
    if args.baseline is None or not (args.baseline / 'composer_sampling').is_dir():
        parser.error('--baseline must be a folder holding a composer_sampling package (see the docstring)')
    trees = {'this tree': ROOT, 'baseline': args.baseline.resolve()}
    found: dict[tuple[str, str], list[dict[str, float]]] = {}
    for number in range(args.rounds + 1):  # the first round warms the file cache and is dropped
        order = list(trees) if number % 2 else list(reversed(trees))
        for trainer in ('composer', 'lightning'):
            for tree in order:
                measured = _child(trainer, trees[tree], args.steps)
                if number:
                    found.setdefault((trainer, tree), []).append(measured)

    def median(trainer: str, tree: str, key: str) -> float:
        return statistics.median(item[key] for item in found[(trainer, tree)]) * 1e6

    lines = ['| own time | trainer | this tree | baseline | this tree / baseline |',
             '| --- | --- | ---: | ---: | ---: |']
    for key, what in (('batch', 'per batch'), ('starts', 'fit and epoch starts, per fit')):
        for trainer in ('composer', 'lightning'):
            ours, theirs = median(trainer, 'this tree', key), median(trainer, 'baseline', key)
            lines.append(f'| {what} | {trainer.capitalize()} | {ours:,.1f} us | {theirs:,.1f} us | '
                         f'{ours / theirs:.2f}x |')
    body = '\n'.join(lines) + (
        f'\n\nMedians over {args.rounds} rounds after a warm-up round; in each round, per trainer, one process of '
        f'each tree, their order turned each round. {args.steps} batches a fit (four epochs of batch 64, a '
        '64-256-10 MLP), torch intra-op threads: 1. The machine may be shared with other jobs: compare the two '
        'columns of one row.')
    command = f'.venv/bin/python scripts/bench_adapters.py --baseline BASELINE --rounds {args.rounds} --steps ' \
              f'{args.steps}'
    write_section('bench_adapters.py', command, body)


if __name__ == '__main__':
    main()
