"""Resume cost: wall time from ``Trainer(load_path=...)`` to the first trained batch, at batch k of an epoch.

    .venv/bin/python scripts/bench_resume.py [--repeats 3]

Composer's default (torch's DistributedSampler, no SamplerSync) spins the
dataloader through the k batches already trained: it reads and collates them
and throws them away, so the spin costs about ``k x batch x read cost / workers``
(plus the loader's own per-batch overhead). SamplerSync with
ResumableDistributedSampler starts at the checkpoint's sample position, at a cost
that does not grow with k. The speed-up is therefore not a constant: it grows
with k and with the read cost and shrinks with DataLoader workers. The script
measures k = 0, 100, 1000 for in-memory reads with 0 workers, and for reads that
sleep 2 ms (slow storage) with 0 and with 4 workers.

The dataset and model are defined here (a tensor held in memory, a linear
classifier), so the benchmark does not depend on the package's demo modules.
Checkpoints are written once per kind (without read delay); every resume then
builds a Trainer with the setting's loader and loads one. Medians over repeats,
ours and the default interleaved in this one process.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from composer import Trainer
from composer.core import Callback, Event, State
from composer.loggers import Logger
from composer.models import ComposerClassifier
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from composer_sampling import ResumableDistributedSampler, SamplerSync

from bench_report import write_section

SIZE, BATCH, FEATURES, CLASSES = 10_000, 8, 16, 4
PER_EPOCH = SIZE // BATCH
KS = (0, 100, 1000)
#: (read cost in ms, DataLoader workers)
SETTINGS = ((0.0, 0), (2.0, 0), (2.0, 4))


class MemoryDataset(Dataset):
    """``SIZE`` (features, label) pairs held in memory; ``read_ms`` sleeps on every read, as slow storage would."""

    def __init__(self, read_ms: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(SIZE, FEATURES, generator=generator)
        self.targets = torch.randint(0, CLASSES, (SIZE,), generator=generator)
        self.read_s = read_ms / 1000

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.read_s:
            time.sleep(self.read_s)
        return self.features[index], self.targets[index]


class FirstBatchClock(Callback):
    """The time at which the first batch of the resumed run has been fetched."""

    def __init__(self) -> None:
        self.at: float | None = None

    def after_dataloader(self, state: State, logger: Logger) -> None:
        if self.at is None:
            self.at = time.perf_counter()


def loader(kind: str, read_ms: float, workers: int) -> DataLoader:
    dataset = MemoryDataset(read_ms)
    if kind == 'ours':
        sampler: ResumableDistributedSampler | DistributedSampler = ResumableDistributedSampler(dataset)
    else:
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
    return DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=workers)


def trainer(kind: str, read_ms: float, workers: int, **kwargs: Any) -> Trainer:
    model = ComposerClassifier(torch.nn.Linear(FEATURES, CLASSES), num_classes=CLASSES)
    callbacks: list[Callback] = [SamplerSync()] if kind == 'ours' else []
    return Trainer(
        model=model, train_dataloader=loader(kind, read_ms, workers),
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1), device='cpu', seed=17, progress_bar=False,
        log_to_console=False, load_progress_bar=False, callbacks=callbacks + kwargs.pop('callbacks', []), **kwargs,
    )


def save_at_resume_points(state: State, event: Event) -> bool:
    if event == Event.EPOCH_CHECKPOINT:
        return int(state.timestamp.epoch) == 1
    return event == Event.BATCH_CHECKPOINT and int(state.timestamp.batch) - PER_EPOCH in KS[1:]


def checkpoints(kind: str, folder: Path) -> dict[int, Path]:
    """Train (no read delay) through epoch 0 and 1000 batches of epoch 1, saving at k = 0, 100, 1000."""
    trainer(kind, 0.0, 0, max_duration=f'{PER_EPOCH + max(KS)}ba', save_folder=str(folder),
            save_interval=save_at_resume_points).fit()
    return {k: folder / f'ep1-ba{PER_EPOCH + k}-rank0.pt' for k in KS}


def time_to_first_batch(kind: str, path: Path, k: int, read_ms: float, workers: int) -> float:
    clock = FirstBatchClock()
    start = time.perf_counter()
    trainer(kind, read_ms, workers, load_path=str(path), max_duration=f'{PER_EPOCH + k + 1}ba',
            callbacks=[clock]).fit()
    assert clock.at is not None
    return clock.at - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    rows = [
        f'Dataset of {SIZE:,} samples, batch {BATCH}: {PER_EPOCH} batches an epoch; resume in epoch 1 at batch k. '
        '"spin" is the default\'s time minus ours, against the model k x batch x read / workers.',
        '',
        '| read | workers | k | SamplerSync + ResumableDistributedSampler | Composer default (spin) | spin | '
        'k x batch x read / workers | speed-up |',
        '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {kind: checkpoints(kind, Path(tmp) / kind) for kind in ('ours', 'composer')}
        for read_ms, workers in SETTINGS:
            for k in KS:
                ours, theirs = [], []
                for _ in range(args.repeats):
                    ours.append(time_to_first_batch('ours', paths['ours'][k], k, read_ms, workers))
                    theirs.append(time_to_first_batch('composer', paths['composer'][k], k, read_ms, workers))
                our_s, their_s = statistics.median(ours), statistics.median(theirs)
                model_s = k * BATCH * read_ms / 1000 / max(workers, 1)
                read = f'{read_ms:g} ms' if read_ms else 'in memory'
                rows.append(f'| {read} | {workers} | {k} | {our_s:.2f} s | {their_s:.2f} s | '
                            f'{their_s - our_s:.2f} s | {model_s:.2f} s | {their_s / our_s:.1f}x |')
                print(rows[-1], flush=True)
    rows.append(
        f'\nMedians over {args.repeats} repeats; each time includes building the Trainer (and its DataLoader workers) '
        'and loading the checkpoint. The speed-up is not a constant: ours costs about the same at any k, the spin '
        'grows as k x batch x read / workers (with in-memory reads only the loader\'s per-batch overhead is left), so '
        'the ratio is large for slow reads and a late resume and small for fast reads, an early resume or many '
        'workers.',
    )
    write_section('bench_resume.py', f'.venv/bin/python scripts/bench_resume.py --repeats {args.repeats}',
                  '\n'.join(rows))


if __name__ == '__main__':
    main()
