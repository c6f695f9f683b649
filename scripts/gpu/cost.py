"""What SamplerSync and SampleLedger add to a training step that keeps the device busy, against an empty callback.

Three fits of the same model and data, side by side in one process, their order
turned each round after one warm-up round: with a ``Callback()`` that does nothing,
with ``SamplerSync()``, and with ``SampleLedger``. On the GPU the model is an MLP of
about 51M parameters (256 inputs, four hidden layers of 4096, ten classes) in
``amp_bf16``, from batch 256, the batch doubled (:func:`calibrated`) until a step with
the empty callback takes at least 5 ms, so that the device, not the host, sets the
step; on the CPU a small one, so that a dry run takes seconds. Every fit reads its
batches from tensors in memory through a ``ResumableDistributedSampler``.

Two numbers per callback, medians over the rounds:

* the **step**: one ``batch_start`` to the next, wall time (the clock of
  ``scripts/bench_ledger.py``), as a user sees it;
* its **own time**: every event Composer hands the instance, timed where it runs
  (and the ledger's tap listener), per batch; minus the empty callback's own time,
  as a share of the empty callback's step. The target is under 0.1% each.

On a GPU the host queues the step's kernels ahead of the device, so a callback's own
time may hide entirely in the step; the share counts it as if it did not.

Example:
    >>> SIZES['gpu'].parameters() // 10**6
    51
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpu.table import OK, OVER_TARGET, REPORTED, Row

__all__ = ['MAX_BATCH', 'MIN_STEP', 'SIZES', 'TARGET', 'VARIANTS', 'CostModel', 'calibrated', 'cost_rows',
           'measure']

#: The share of the step that each callback's own time beyond the empty callback must stay under.
TARGET = 0.001
#: The fits of a round: an empty callback (the anchor), SamplerSync, SampleLedger.
VARIANTS = ('empty', 'sync', 'ledger')
NAMES = {'empty': 'an empty Callback()', 'sync': 'SamplerSync', 'ledger': 'SampleLedger'}
#: Seconds: the batch is doubled until a step with the empty callback takes at least this long, up to MAX_BATCH.
MIN_STEP = 0.005
MAX_BATCH = 16384


@dataclass(frozen=True)
class CostModel:
    """The MLP and data of the cost fits: ``depth`` hidden layers of ``width``, ``steps`` batches of ``batch``."""

    features: int
    width: int
    depth: int
    classes: int
    batch: int
    steps: int

    def parameters(self) -> int:
        """The MLP's parameter count, weights and biases.

        Example:
            >>> CostModel(features=2, width=3, depth=1, classes=2, batch=1, steps=1).parameters()
            17
        """
        sizes = [self.features, *[self.width] * self.depth, self.classes]
        return sum(fan_in * fan_out + fan_out for fan_in, fan_out in itertools.pairwise(sizes))


SIZES = {'gpu': CostModel(features=256, width=4096, depth=4, classes=10, batch=256, steps=100),
         'cpu': CostModel(features=32, width=64, depth=2, classes=10, batch=32, steps=40)}


def _mlp(size: CostModel) -> Any:
    import torch

    layers: list[torch.nn.Module] = []
    fan_in = size.features
    for _ in range(size.depth):
        layers += [torch.nn.Linear(fan_in, size.width), torch.nn.ReLU()]
        fan_in = size.width
    return torch.nn.Sequential(*layers, torch.nn.Linear(fan_in, size.classes))


def one_fit(size: CostModel, variant: str, device: str, precision: str, folder: Path) -> dict[str, float]:
    """Fit one epoch as ``variant``; the median wall step and the variant's own time per batch, in seconds."""
    import torch
    from composer import Trainer
    from composer.core import Callback
    from composer.models import ComposerClassifier
    from torch.utils.data import DataLoader, TensorDataset

    from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync

    from bench_ledger import clock_callback, instrument, own_per_batch

    generator = torch.Generator().manual_seed(0)
    samples = size.batch * size.steps
    dataset = TensorDataset(torch.randn(samples, size.features, generator=generator),
                            torch.randint(0, size.classes, (samples,), generator=generator))
    loader = DataLoader(dataset, batch_size=size.batch, sampler=ResumableDistributedSampler(dataset))
    callback = {'empty': Callback, 'sync': SamplerSync,
                'ledger': lambda: SampleLedger(folder=str(folder / 'ledger'))}[variant]()
    calls = instrument(callback)
    clock = clock_callback()
    model = ComposerClassifier(_mlp(size), num_classes=size.classes)
    trainer = Trainer(model=model, train_dataloader=loader, optimizers=torch.optim.AdamW(model.parameters(), lr=1e-4),
                      max_duration='1ep', device=device, precision=precision, seed=17, progress_bar=False,
                      log_to_console=False, callbacks=[clock, callback])
    trainer.fit()
    trainer.close()
    del trainer, model
    if device == 'gpu':
        torch.cuda.empty_cache()
    return {'wall': statistics.median(clock.steps['wall']), 'own': own_per_batch(calls, clock.batches),
            'batches': clock.batches}


def calibrated(size: CostModel, device: str, precision: str, min_step: float = MIN_STEP,
               max_batch: int = MAX_BATCH) -> CostModel:
    """``size`` with its batch doubled until a step with the empty callback takes ``min_step`` (short fits of at
    most 20 steps), or until a doubling would pass ``max_batch``."""
    with tempfile.TemporaryDirectory(prefix='check-gpu-calibrate-') as scratch:
        while True:
            probe = replace(size, steps=min(size.steps, 20))
            step = one_fit(probe, 'empty', device, precision, Path(scratch) / f'batch{size.batch}')['wall']
            print(f'  batch {size.batch}: a step takes {step * 1e3:.2f} ms', flush=True)
            if step >= min_step or size.batch * 2 > max_batch:
                return size
            size = replace(size, batch=size.batch * 2)


def measure(size: CostModel, device: str, precision: str, rounds: int,
            warm_up: bool = True) -> dict[str, list[dict[str, float]]]:
    """``rounds`` rounds of every variant, the order turned each round, after a warm-up round unless ``warm_up`` is
    false (the warm-up warms the kernels, the allocator and the imports)."""
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    first = 0 if warm_up else 1
    with tempfile.TemporaryDirectory(prefix='check-gpu-cost-') as scratch:
        for round_ in range(first, rounds + 1):
            turn = round_ % len(VARIANTS)
            for variant in VARIANTS[turn:] + VARIANTS[:turn]:
                result = one_fit(size, variant, device, precision, Path(scratch) / f'{variant}-{round_}')
                if round_:
                    results[variant].append(result)
    return results


def cost_rows(results: dict[str, list[dict[str, float]]], size: CostModel, precision: str) -> list[Row]:
    """The step, then one row per callback judged against :data:`TARGET` (a miss is said, not failed).

    Example:
        >>> runs = {'empty': [{'wall': 0.005, 'own': 20e-6}], 'sync': [{'wall': 0.005, 'own': 22e-6}],
        ...         'ledger': [{'wall': 0.0051, 'own': 30e-6}]}
        >>> [(row.check, row.result) for row in cost_rows(runs, SIZES['gpu'], 'amp_bf16')]
        [('step', 'reported'), ('SamplerSync per step', 'ok'), ('SampleLedger per step', 'over target')]
    """
    def median(variant: str, key: str) -> float:
        return statistics.median(run[key] for run in results[variant])

    step, anchor = median('empty', 'wall'), median('empty', 'own')
    rounds = len(results['empty'])
    rows = [Row('cost', 'step', REPORTED,
                f'{step * 1e3:.2f} ms wall with {NAMES["empty"]} ({anchor * 1e6:.1f} us of its own); MLP of '
                f'{size.parameters():,} parameters, batch {size.batch}, {precision}; medians of {rounds} '
                f'rounds of {size.steps} steps')]
    for variant in ('sync', 'ledger'):
        beyond = median(variant, 'own') - anchor
        share = beyond / step
        rows.append(Row('cost', f'{NAMES[variant]} per step', OK if share < TARGET else OVER_TARGET,
                        f'{beyond * 1e6:+.1f} us beyond the empty callback, {share:+.3%} of the step (target under '
                        f'{TARGET:.1%}); own {median(variant, "own") * 1e6:.1f} us; step '
                        f'{median(variant, "wall") * 1e3:.2f} ms against {step * 1e3:.2f} ms'))
    return rows
