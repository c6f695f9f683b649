"""What the Hugging Face SamplerSync costs a training step, against an empty ``TrainerCallback``.

    .venv-lightning/bin/python scripts/bench_transformers.py [--rounds 7] [--steps 200] [--threads 1]

Fits of a real ``transformers.Trainer`` on one CPU process, side by side in this
process, their order turned each round after one warm-up round: one with a
``TrainerCallback()`` that does nothing, one with
``composer_sampling.transformers.SamplerSync()`` attached. The model is a small MLP (64
inputs, two hidden layers of 256) at batch 64 over tensors in memory, through a
``ResumableDistributedSampler`` returned by ``_get_train_sampler``, so that the step is
short and the callback's cost shows. Two numbers per fit, medians over the rounds:

* the **step**: one ``on_step_begin`` to the next, wall time, taken by a clock callback
  placed first;
* the callback's **own time**: every hook transformers calls on the instance during the
  fit, and the parts of the trainer methods that ``attach`` wraps which run the callback's
  code (``train_starts``, ``loader_built``, ``resumed_loader``, ``checkpoint_saved``),
  timed where they run (a wrapper around each method of the instance), per step; the
  placement of the loader at train begin (seeds, ``set_epoch``, the offset) is in it,
  spread over the fit.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
import warnings
from typing import Any

from bench_report import write_section

#: What the callback's own code runs in: the trainer methods attach wraps hand these to it.
WRAPPED = ('train_starts', 'loader_built', 'resumed_loader', 'checkpoint_saved')


def hooks() -> tuple[str, ...]:
    """Every event transformers may call on a callback (each callback gets every one)."""
    from transformers import TrainerCallback

    return tuple(name for name in vars(TrainerCallback) if name.startswith('on_'))


def clock_callback() -> Any:
    """A callback stamping every ``on_step_begin`` (wall)."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.steps: list[float] = []
            self.count = 0
            self._last: float | None = None

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._last = None  # an interval across an epoch's end holds the epoch's end

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.perf_counter()
            if self._last is not None:
                self.steps.append(now - self._last)
            self._last = now
            self.count += 1

    return Clock()


def instrument(callback: Any) -> list[float]:
    """Time every hook of ``callback``, and the methods that the wrapped trainer methods call on it (on the
    instance); the seconds each call took."""
    calls: list[float] = []
    for name in (*hooks(), *WRAPPED):
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


def one_fit(variant: str, steps: int, folder: str) -> dict[str, float]:
    """One fit with ``variant`` (``empty`` or ``sync``); its median step and its callback's own time per step."""
    import torch
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from composer_sampling import ResumableDistributedSampler
    from composer_sampling.transformers import SamplerSync

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                           torch.nn.ReLU(), torch.nn.Linear(256, 10))

        def forward(self, features: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {'loss': torch.nn.functional.cross_entropy(self.net(features), labels)}

    class Tensors(Dataset):
        def __init__(self, size: int) -> None:
            generator = torch.Generator().manual_seed(0)
            self.features = torch.randn(size, 64, generator=generator)
            self.labels = torch.randint(0, 10, (size,), generator=generator)

        def __len__(self) -> int:
            return len(self.labels)

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            return {'features': self.features[index], 'labels': self.labels[index]}

    class Ours(Trainer):
        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            return ResumableDistributedSampler(train_dataset, self.args.world_size, self.args.process_index)

    torch.manual_seed(17)
    args = TrainingArguments(folder, per_device_train_batch_size=64, num_train_epochs=1, seed=17,
                             learning_rate=0.01, save_strategy='no', logging_strategy='no', report_to=[],
                             use_cpu=True, disable_tqdm=True, dataloader_pin_memory=False)
    clock = clock_callback()
    callback = SamplerSync() if variant == 'sync' else TrainerCallback()
    calls = instrument(callback)
    trainer = Ours(model=MLP(), args=args, train_dataset=Tensors(64 * steps), callbacks=[clock])
    if variant == 'sync':
        callback.attach(trainer)
    else:
        trainer.add_callback(callback)
    trainer.train()
    return {'step': statistics.median(clock.steps), 'own': sum(calls) / clock.count}


def measure(rounds: int, steps: int, folder: str) -> dict[str, list[dict[str, float]]]:
    variants = ('empty', 'sync')
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for round_ in range(rounds + 1):
        for variant in (variants if round_ % 2 else variants[::-1]):
            result = one_fit(variant, steps, folder)
            if round_:  # the first round warms the imports and the allocator
                results[variant].append(result)
    return results


def report(results: dict[str, list[dict[str, float]]], rounds: int, steps: int, threads: int,
           load: tuple[float, float]) -> str:
    def median(variant: str, key: str) -> float:
        return statistics.median(run[key] for run in results[variant])

    import accelerate
    import transformers

    def paired(key: str) -> float:
        """The median of each round's difference, SamplerSync's fit less the empty one's: a load that drifts
        between rounds moves both fits of a round."""
        return statistics.median(sync[key] - empty[key] for sync, empty in zip(results['sync'], results['empty'],
                                                                                 strict=True))

    step = median('empty', 'step')
    more, beyond = paired('step'), paired('own')
    rows = ['| per optimizer step | an empty `TrainerCallback()` | `SamplerSync` | SamplerSync beyond the empty one |',
            '| --- | ---: | ---: | ---: |',
            f'| step, wall (median) | {step * 1e6:,.0f} us | {median("sync", "step") * 1e6:,.0f} us | '
            f'{more * 1e6:+,.0f} us ({more / step:+.2%}) |',
            f'| the callback\'s own time: every hook it is called for, and its code in the trainer methods it wraps | '
            f'{median("empty", "own") * 1e6:.1f} us | '
            f'{median("sync", "own") * 1e6:.1f} us | {beyond * 1e6:+.1f} us ({beyond / step:+.3%} of the step) |']
    return '\n'.join(rows) + (
        f'\n\ntransformers {transformers.__version__}, accelerate {accelerate.__version__}. Medians over {rounds} '
        f'rounds after a warm-up round, the two fits of a round in turns; {steps} steps per fit, one epoch, batch 64 '
        f'of a 64-256-256-10 MLP, no gradient accumulation, torch intra-op threads: {threads}. The last column is '
        'the median of the rounds\' differences, SamplerSync\'s fit less the empty one\'s. "step" is one '
        '`on_step_begin` to the next (a clock callback first in the list). Own time: every hook method of the '
        f'instance (transformers calls each of its {len(hooks())} events on every callback), and the callback '
        'methods that the '
        "wrapped trainer methods call, wrapped and timed, summed and divided by the fit's steps: SamplerSync's "
        'placement of the loader at train begin (its walk of the graph, seeds, `set_epoch`) is spread over the fit. '
        f'The load average of the machine (one minute) was {load[0]:.1f} at the start and {load[1]:.1f} at the end: '
        'other jobs shared the cores, so the step and its noise are longer than on an idle machine.')


def main() -> None:
    import tempfile

    import torch

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=200)
    parser.add_argument('--threads', type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings('ignore')
    started = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        results = measure(args.rounds, args.steps, folder)
    load = (started, os.getloadavg()[0])
    command = (f'.venv-lightning/bin/python scripts/bench_transformers.py --rounds {args.rounds} --steps {args.steps} '
               f'--threads {args.threads}')
    write_section('bench_transformers.py', command, report(results, args.rounds, args.steps, args.threads, load))


if __name__ == '__main__':
    main()
