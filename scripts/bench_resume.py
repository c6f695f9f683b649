"""Resume cost: wall time from ``Trainer(load_path=...)`` to the first trained batch, at batch k of an epoch.

    .venv/bin/python scripts/bench_resume.py [--repeats 3]

The dataset takes 2 ms per sample read. Composer's default (torch's
DistributedSampler, no SamplerSync) spins the dataloader through the k batches
already trained; SamplerSync with ResumableDistributedSampler starts at the
checkpoint's sample position. Medians over repeats, both measured in this run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from composer import Trainer
from composer.core import Callback, Event, State
from composer.loggers import Logger
from torch.utils.data import DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.demo.data import SyntheticDataset
from composer_sampling.demo.model import MLPClassifier

from bench_report import write_section

SIZE, BATCH, DELAY_MS = 10_000, 8, 2.0
PER_EPOCH = SIZE // BATCH
KS = (0, 100, 1000)


class FirstBatchClock(Callback):
    def __init__(self) -> None:
        self.at: float | None = None

    def after_dataloader(self, state: State, logger: Logger) -> None:
        if self.at is None:
            self.at = time.perf_counter()


def loader(kind: str, delay_ms: float) -> DataLoader:
    dataset = SyntheticDataset(SIZE, read_delay_ms=delay_ms)
    if kind == 'ours':
        sampler = ResumableDistributedSampler(dataset)
    else:
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
    return DataLoader(dataset, batch_size=BATCH, sampler=sampler)


def trainer(kind: str, delay_ms: float, **kwargs) -> Trainer:
    model = MLPClassifier(hidden_size=16)
    callbacks = [SamplerSync()] if kind == 'ours' else []
    return Trainer(
        model=model, train_dataloader=loader(kind, delay_ms), optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        device='cpu', seed=17, progress_bar=False, log_to_console=False, load_progress_bar=False,
        callbacks=callbacks + kwargs.pop('callbacks', []), **kwargs,
    )


def save_at_resume_points(state: State, event: Event) -> bool:
    if event == Event.EPOCH_CHECKPOINT:
        return int(state.timestamp.epoch) == 1
    return event == Event.BATCH_CHECKPOINT and int(state.timestamp.batch) - PER_EPOCH in KS[1:]


def checkpoints(kind: str, folder: Path) -> dict[int, Path]:
    """Train (without the read delay) through epoch 0 and 1000 batches of epoch 1, saving at k = 0, 100, 1000."""
    trainer(kind, 0.0, max_duration=f'{PER_EPOCH + max(KS)}ba', save_folder=str(folder),
            save_interval=save_at_resume_points).fit()
    return {k: folder / f'ep1-ba{PER_EPOCH + k}-rank0.pt' for k in KS}


def time_to_first_batch(kind: str, path: Path, k: int) -> float:
    clock = FirstBatchClock()
    start = time.perf_counter()
    trainer(kind, DELAY_MS, load_path=str(path), max_duration=f'{PER_EPOCH + k + 1}ba', callbacks=[clock]).fit()
    assert clock.at is not None
    return clock.at - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {kind: checkpoints(kind, Path(tmp) / kind) for kind in ('ours', 'composer')}
        rows = [
            f'Dataset of {SIZE:,} samples at {DELAY_MS:g} ms a read, batch {BATCH}: {PER_EPOCH} batches an epoch; '
            'resume in epoch 1 at batch k.',
            '',
            '| k | SamplerSync + ResumableDistributedSampler | Composer default (spin) | speed-up |',
            '| ---: | ---: | ---: | ---: |',
        ]
        for k in KS:
            ours, theirs = [], []
            for _ in range(args.repeats):
                ours.append(time_to_first_batch('ours', paths['ours'][k], k))
                theirs.append(time_to_first_batch('composer', paths['composer'][k], k))
            our_s, their_s = statistics.median(ours), statistics.median(theirs)
            rows.append(f'| {k} | {our_s:.2f} s | {their_s:.2f} s | {their_s / our_s:.1f}x |')
    rows.append('\nMedians over repeats; each includes building the Trainer and loading the checkpoint.')
    write_section('bench_resume.py', f'.venv/bin/python scripts/bench_resume.py --repeats {args.repeats}',
                  '\n'.join(rows))


if __name__ == '__main__':
    main()
