"""Resume cost: wall time from ``Trainer(load_path=...)`` to the first trained batch, at batch k of an epoch.

    .venv/bin/python scripts/bench_resume.py [--repeats 3]

Three ways to resume the same DataLoader shape, ``DataLoader(dataset, batch_size=B,
sampler=...)`` (llm-foundry's finetuning loader, what ``composer.utils.dist.get_sampler``
builds):

* Composer's default: torch's ``DistributedSampler``, no SamplerSync. Composer spins
  the dataloader through the k batches already trained: it reads and collates them
  and throws them away, so the spin costs about ``k x batch x read cost / workers``
  (plus the loader's own per-batch overhead, and one batch read for every earlier
  epoch, which Composer starts and breaks off to advance the sampler).
* torch's ``DistributedSampler`` under SamplerSync: the same loader plus
  ``callbacks=[SamplerSync()]``. SamplerSync switches the spin off and puts an
  ``IndexTap`` on ``loader.batch_sampler.sampler`` that drops the indices of the
  trained batches: the sampler still starts its epoch as usual (torch's draws a
  permutation of the whole dataset) and the first ``k x batch`` indices are drawn
  and skipped, but no trained sample is read or collated. Its cost is the
  sampler's own epoch start plus O(k x batch) indices, microseconds here.
* ResumableDistributedSampler under SamplerSync: the sampler starts at the
  checkpoint's sample position, at a cost that does not grow with k.

Both SamplerSync cases therefore cost about the same at any k, and their speed-up
over the spin is not a constant: it grows with k and with the read cost and shrinks
with DataLoader workers. The script measures k = 0, 100, 1000 for in-memory reads
with 0 workers, and for reads that sleep 2 ms (slow storage) with 0 and with 4
workers. With 0 workers it also counts the samples read before the first batch, and
fails unless the SamplerSync cases read only that batch and the spin the batch of
epoch 0 and every trained batch too.

The dataset and model are defined here (a tensor held in memory, a linear
classifier), so the benchmark does not depend on the package's demo modules.
Checkpoints are written once per kind (without read delay, with SamplerSync for the
two SamplerSync cases); every resume then builds a Trainer with the setting's loader
and loads one. Medians over repeats, the three cases interleaved in this one process.
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
#: The cases, in the order they run within a repeat: Composer's spin, torch's sampler under SamplerSync, ours.
KINDS = ('composer', 'torch+sync', 'ours')
SYNCED = ('torch+sync', 'ours')


class MemoryDataset(Dataset):
    """``SIZE`` (features, label) pairs held in memory; ``read_ms`` sleeps on every read, as slow storage would."""

    def __init__(self, read_ms: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(SIZE, FEATURES, generator=generator)
        self.targets = torch.randint(0, CLASSES, (SIZE,), generator=generator)
        self.read_s = read_ms / 1000
        self.reads = 0  # samples read in this process (all of them with 0 workers)

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        if self.read_s:
            time.sleep(self.read_s)
        return self.features[index], self.targets[index]


class FirstBatchClock(Callback):
    """The time at which the first batch of the resumed run has been fetched, and the samples read until then."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.reads = 0

    def after_dataloader(self, state: State, logger: Logger) -> None:
        if self.at is None:
            self.at = time.perf_counter()
            self.reads = state.train_dataloader.dataset.reads


def loader(kind: str, read_ms: float, workers: int) -> DataLoader:
    dataset = MemoryDataset(read_ms)
    if kind == 'ours':
        sampler: ResumableDistributedSampler | DistributedSampler = ResumableDistributedSampler(dataset)
    else:
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
    return DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=workers)


def trainer(kind: str, read_ms: float, workers: int, device: str = 'cpu', **kwargs: Any) -> Trainer:
    model = ComposerClassifier(torch.nn.Linear(FEATURES, CLASSES), num_classes=CLASSES)
    callbacks: list[Callback] = [SamplerSync()] if kind in SYNCED else []
    return Trainer(
        model=model, train_dataloader=loader(kind, read_ms, workers),
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1), device=device, seed=17, progress_bar=False,
        log_to_console=False, load_progress_bar=False, callbacks=callbacks + kwargs.pop('callbacks', []), **kwargs,
    )


def save_at_resume_points(state: State, event: Event) -> bool:
    if event == Event.EPOCH_CHECKPOINT:
        return int(state.timestamp.epoch) == 1
    return event == Event.BATCH_CHECKPOINT and int(state.timestamp.batch) - PER_EPOCH in KS[1:]


def checkpoints(kind: str, folder: Path, device: str = 'cpu') -> dict[int, Path]:
    """Train (no read delay) through epoch 0 and 1000 batches of epoch 1, saving at k = 0, 100, 1000."""
    trainer(kind, 0.0, 0, device, max_duration=f'{PER_EPOCH + max(KS)}ba', save_folder=str(folder),
            save_interval=save_at_resume_points).fit()
    return {k: folder / f'ep1-ba{PER_EPOCH + k}-rank0.pt' for k in KS}


def first_batch(kind: str, path: Path, k: int, read_ms: float, workers: int,
                device: str = 'cpu') -> tuple[float, int]:
    """Seconds from ``Trainer(load_path=...)`` to the first batch of a resume at batch ``k``, and the samples read
    until then (this process's reads: all of them with 0 workers, where they are checked)."""
    clock = FirstBatchClock()
    start = time.perf_counter()
    trainer(kind, read_ms, workers, device, load_path=str(path), max_duration=f'{PER_EPOCH + k + 1}ba',
            callbacks=[clock]).fit()
    assert clock.at is not None
    if workers == 0:  # every read happened in this process: the SamplerSync cases read the first batch only
        expected = BATCH if kind in SYNCED else (1 + k + 1) * BATCH  # the spin: a batch of epoch 0, then k
        if clock.reads != expected:
            raise RuntimeError(f'{kind} at k = {k} read {clock.reads} samples before its first batch, '
                               f'expected {expected}')
    return clock.at - start, clock.reads


def duration(seconds: float) -> str:
    return f'{seconds * 1000:.0f} ms' if abs(seconds) < 1 else f'{seconds:.2f} s'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    rows = [
        f'Dataset of {SIZE:,} samples, batch {BATCH}: {PER_EPOCH} batches per epoch; resume in epoch 1 at batch k, '
        'the same `DataLoader(dataset, batch_size, sampler=...)` in every case. "spin cost" is the spin\'s time '
        'minus ResumableDistributedSampler\'s, against the model k x batch x read / workers; the two speed-ups are '
        'the spin\'s time over each SamplerSync case\'s.',
        '',
        '| read | workers | k | Composer default: DistributedSampler (spin) | DistributedSampler + SamplerSync | '
        'ResumableDistributedSampler + SamplerSync | spin cost | k x batch x read / workers | '
        'speed-up, DistributedSampler + SamplerSync | speed-up, ResumableDistributedSampler + SamplerSync |',
        '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {kind: checkpoints(kind, Path(tmp) / kind.replace('+', '_')) for kind in KINDS}
        for kind in KINDS:  # warm-up, not timed: the first resume of each kind pays one-off costs
            first_batch(kind, paths[kind][0], 0, 0.0, 0)
        for read_ms, workers in SETTINGS:
            for k in KS:
                times: dict[str, list[float]] = {kind: [] for kind in KINDS}
                for _ in range(args.repeats):
                    for kind in KINDS:
                        times[kind].append(first_batch(kind, paths[kind][k], k, read_ms, workers)[0])
                spin_s, torch_s, our_s = (statistics.median(times[kind]) for kind in KINDS)
                model_s = k * BATCH * read_ms / 1000 / max(workers, 1)
                read = f'{read_ms:g} ms' if read_ms else 'in memory'
                rows.append(f'| {read} | {workers} | {k} | {duration(spin_s)} | {duration(torch_s)} | '
                            f'{duration(our_s)} | {duration(spin_s - our_s)} | {duration(model_s)} | '
                            f'{spin_s / torch_s:.1f}x | {spin_s / our_s:.1f}x |')
                print(rows[-1], flush=True)
    rows.append(
        f'\nMedians over {args.repeats} repeats, the three cases interleaved, after one untimed resume of each; each '
        'time includes building the Trainer (and its DataLoader workers) and loading the checkpoint. With 0 workers '
        'every run was checked to read only the first batch under SamplerSync, and under the spin k + 2 batches '
        '(Composer also reads one batch of epoch 0 to advance the sampler). Under SamplerSync torch\'s '
        'DistributedSampler draws its permutation of the dataset and skips k x batch indices without reading them, '
        'so both SamplerSync cases cost about the same at any k. The speed-up is not a constant: the '
        'spin grows as k x batch x read / workers (with in-memory reads only the loader\'s per-batch overhead is '
        'left), so the ratio is large for slow reads and a late resume and small for fast reads, an early resume or '
        'many workers.',
    )
    write_section('bench_resume.py', f'.venv/bin/python scripts/bench_resume.py --repeats {args.repeats}',
                  '\n'.join(rows))


if __name__ == '__main__':
    main()
