"""What the Lightning SamplerSync costs a training step, against an empty Lightning callback.

    .venv/bin/python scripts/bench_lightning.py [--rounds 7] [--steps 200] [--threads 1]

Fits of a real Lightning ``Trainer`` on one CPU process, side by side in this process,
their order turned each round after one warm-up round: one with a ``Callback()`` that
does nothing, one with ``composer_sampling.lightning.SamplerSync()``. The model is a
small MLP (64 inputs, two hidden layers of 256) at batch 64 over tensors in memory,
through a ``ResumableDistributedSampler``, so that the step is short and the callback's
cost shows. Two numbers per fit, medians over the rounds:

* the **step**: one ``on_train_batch_start`` to the next, wall time, taken by a clock
  callback placed first;
* the callback's **own time**: every hook Lightning calls on the instance during the fit,
  timed where it runs (a wrapper around each hook method of the instance), per batch;
  the first batch's placement of the loader (seeds, ``set_epoch``, the offset) is in it,
  spread over the fit.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
import warnings
from typing import Any

from bench_report import write_section

#: The hooks Lightning may call on a callback during a fit (every one SamplerSync has, and the empty one's too), and
#: SamplerSync's placement of the train loader, which its wrapper of the strategy's process_dataloader calls.
HOOKS = ('setup', 'on_fit_start', 'on_train_start', 'on_train_epoch_start', 'on_train_batch_start',
         'on_train_batch_end', 'on_train_epoch_end', 'on_train_end', 'on_fit_end', 'teardown', 'state_dict', '_place')


def clock_callback() -> Any:
    """A Lightning callback stamping every ``on_train_batch_start`` (wall)."""
    import pytorch_lightning as pl

    class Clock(pl.Callback):
        def __init__(self) -> None:
            self.steps: list[float] = []
            self.batches = 0
            self._last: float | None = None

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self._last = None  # an interval across an epoch's end holds the epoch's end

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            now = time.perf_counter()
            if self._last is not None:
                self.steps.append(now - self._last)
            self._last = now
            self.batches += 1

    return Clock()


def instrument(callback: Any) -> list[float]:
    """Time every hook of ``callback`` (on the instance); the seconds each call took."""
    calls: list[float] = []
    for name in HOOKS:
        method = getattr(callback, name, None)
        if method is None:
            continue

        def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                calls.append(time.perf_counter() - started)

        setattr(callback, name, functools.wraps(method)(timed))
    return calls


def one_fit(variant: str, steps: int) -> dict[str, float]:
    """One fit with ``variant`` (``empty`` or ``sync``); its median step and its callback's own time per batch."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from composer_sampling import ResumableDistributedSampler
    from composer_sampling.lightning import SamplerSync

    class MLP(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                           torch.nn.ReLU(), torch.nn.Linear(256, 10))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            features, labels = batch
            return torch.nn.functional.cross_entropy(self.net(features), labels)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    pl.seed_everything(17, verbose=False)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64 * steps, 64, generator=generator),
                         torch.randint(0, 10, (64 * steps,), generator=generator))
    loader = DataLoader(data, batch_size=64, sampler=ResumableDistributedSampler(data, 1, 0))
    callback = SamplerSync() if variant == 'sync' else pl.Callback()
    calls = instrument(callback)
    clock = clock_callback()
    trainer = pl.Trainer(max_epochs=1, accelerator='cpu', devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, use_distributed_sampler=False,
                         callbacks=[clock, callback])
    trainer.fit(MLP(), loader)
    return {'step': statistics.median(clock.steps), 'own': sum(calls) / clock.batches,
            'median_call': statistics.median(calls) if calls else 0.0}


def measure(rounds: int, steps: int) -> dict[str, list[dict[str, float]]]:
    variants = ('empty', 'sync')
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for round_ in range(rounds + 1):
        for variant in (variants if round_ % 2 else variants[::-1]):
            result = one_fit(variant, steps)
            if round_:  # the first round warms the imports and the allocator
                results[variant].append(result)
    return results


def report(results: dict[str, list[dict[str, float]]], rounds: int, steps: int, threads: int) -> str:
    def median(variant: str, key: str) -> float:
        return statistics.median(run[key] for run in results[variant])

    step = median('empty', 'step')
    beyond = median('sync', 'own') - median('empty', 'own')
    rows = ['| per batch | an empty `Callback()` | `SamplerSync` | SamplerSync beyond the empty one |',
            '| --- | ---: | ---: | ---: |',
            f'| step, wall (median) | {step * 1e6:,.0f} us | {median("sync", "step") * 1e6:,.0f} us | '
            f'{(median("sync", "step") - step) * 1e6:+,.0f} us ({(median("sync", "step") - step) / step:+.2%}) |',
            f'| the callback\'s own time: every hook it is called for, and its placement of the loader | '
            f'{median("empty", "own") * 1e6:.1f} us | '
            f'{median("sync", "own") * 1e6:.1f} us | {beyond * 1e6:+.1f} us ({beyond / step:+.3%} of the step) |']
    return '\n'.join(rows) + (
        f'\n\nMedians over {rounds} rounds after a warm-up round, the two fits of a round in turns; {steps} steps a '
        f'fit, one epoch, batch 64 of a 64-256-256-10 MLP, torch intra-op threads: {threads}. "step" is one '
        '`on_train_batch_start` to the next (a clock callback first in the list). Own time: every hook method of '
        'the instance, wrapped and timed, summed and divided by the fit\'s batches: SamplerSync\'s placement of the '
        'loader at the start of the fit (its walk of the graph, seeds, `set_epoch`) is spread over the fit, and '
        'each batch costs it two hook calls that count the batch.')


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=200)
    parser.add_argument('--threads', type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings('ignore')
    results = measure(args.rounds, args.steps)
    command = (f'.venv/bin/python scripts/bench_lightning.py --rounds {args.rounds} --steps {args.steps} '
               f'--threads {args.threads}')
    write_section('bench_lightning.py', command, report(results, args.rounds, args.steps, args.threads))


if __name__ == '__main__':
    main()
