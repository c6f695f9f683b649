"""Real parts shared by the tests: a ledger callback, a read-counting dataset, a small trainer."""

from __future__ import annotations

import collections
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch
from composer import Trainer
from composer.core import Callback, State
from composer.loggers import Logger
from torch.utils.data import DataLoader, Dataset

from composer_sampling.recipes.demo.data import SyntheticDataset
from composer_sampling.recipes.demo.model import MLPClassifier


class IndexLedger(Callback):
    """Records the sample indices of every batch this rank trained (at BATCH_END), with its epoch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []
        self.seeds: list[Any] = []

    @property
    def trained(self) -> dict[int, list[int]]:
        """Sample indices per epoch, in training order."""
        per_epoch: dict[int, list[int]] = collections.defaultdict(list)
        for epoch, indices in self.batches:
            per_epoch[epoch].extend(indices)
        return dict(per_epoch)

    def fit_start(self, state: State, logger: Logger) -> None:
        loader = state.train_dataloader
        assert isinstance(loader, DataLoader)
        from composer_sampling import iter_samplers

        self.seeds = [getattr(node, 'seed', None) for node in iter_samplers(loader) if hasattr(node, 'seed')]

    def batch_end(self, state: State, logger: Logger) -> None:
        self.batches.append((int(state.timestamp.epoch), state.batch['index'].tolist()))


class ReadCounter(Dataset):
    """Wraps a dataset and counts how often each index is read."""

    passes_indices_through = True  # sample i is sample i of its dataset: the fingerprint sees through it

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.reads: collections.Counter[int] = collections.Counter()

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        self.reads[index] += 1
        return self.dataset[index]


def synthetic(size: int = 96) -> SyntheticDataset:
    return SyntheticDataset(size, seed=0)


def make_trainer(loader: DataLoader, *, max_duration: str = '2ep', seed: int = 17, **kwargs: Any) -> Trainer:
    """A CPU trainer for the demo MLP over ``loader``; ``kwargs`` go to ``Trainer``."""
    kwargs.setdefault('device_train_microbatch_size', loader.batch_size or 8)
    model = MLPClassifier(hidden_size=8)
    kwargs.setdefault('optimizers', torch.optim.SGD(model.parameters(), lr=0.1))
    return Trainer(
        model=model,
        train_dataloader=loader,
        max_duration=max_duration,
        seed=seed,
        device='cpu',
        progress_bar=False,
        log_to_console=False,
        load_progress_bar=False,
        **kwargs,
    )


def all_ranks(make: Any, world: int, *, epoch: int = 0, start: int = 0) -> list[list[int]]:
    """Every rank's indices for one epoch: ``make(num_replicas, rank)`` builds a rank's sampler."""
    out = []
    for rank in range(world):
        sampler = make(world, rank)
        sampler.set_epoch(epoch)
        sampler.set_sample_in_epoch(start)
        out.append(list(sampler))
    return out


def train_with_ledger(loader: DataLoader, duration: str, folder: Path | None = None, load: Path | None = None,
                      sync: Callback | None = None, microbatch: int | None = None,
                      callbacks_extra: list[Callback] | None = None, **kwargs: Any) -> IndexLedger:
    """Fit ``loader`` with SamplerSync (or ``sync``) and a ledger; save every batch to ``folder``, load ``load``."""
    from composer_sampling import SamplerSync

    ledger = IndexLedger()
    make_trainer(
        loader,
        max_duration=duration,
        device_train_microbatch_size=microbatch or loader.batch_size or 8,
        callbacks=[sync or SamplerSync(), ledger, *(callbacks_extra or [])],
        save_folder=None if folder is None else str(folder),
        save_interval='1ba',
        load_path=None if load is None else str(load),
        **kwargs,
    ).fit()
    return ledger


def checkpoint(folder: Path, batch: int) -> Path:
    """The checkpoint Composer saved after ``batch`` batches."""
    (path,) = folder.glob(f'ep*-ba{batch}-rank0.pt')
    return path


def fixture_writer() -> Any:
    """``tests/fixtures/write_state_fixtures.py`` as a module: the data, model and builders of the fixtures."""
    name = 'write_state_fixtures_for_tests'
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / 'fixtures' / 'write_state_fixtures.py'
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def ledger_and_trained(make_loader: Any, folder: Path, *, ledger_first: bool, stop: int,
                       duration: str = '2ep') -> tuple[list[tuple[int, list[int]]], list[tuple[int, list[int]]]]:
    """Train ``stop`` batches, then resume from that checkpoint to ``duration``, with SampleLedger and SamplerSync
    in the given order; the ledger's trained records ``(epoch, indices)`` of both fits, in order, and the batches
    that trained (their ``index`` field). ``make_loader()`` builds a new loader for each fit."""
    from composer_sampling import SampleLedger, SamplerSync
    from composer_sampling.ledger_format import read_ledger

    trained: list[tuple[int, list[int]]] = []
    for run, resume in ((f'{stop}ba', False), (duration, True)):
        load = checkpoint(folder / 'run', stop) if resume else None
        recorder = IndexLedger()
        ledger, sync = SampleLedger(str(folder / 'ledger')), SamplerSync()
        loader = make_loader()
        make_trainer(loader, max_duration=run, seed=1,
                     callbacks=[ledger, sync, recorder] if ledger_first else [sync, ledger, recorder],
                     save_folder=None if load else str(folder / 'run'), save_interval=f'{stop}ba',
                     load_path=None if load is None else str(load)).fit()
        trained += recorder.batches
    ledgers = sorted((read_ledger(path) for path in (folder / 'ledger').glob('*-rank0.bin')),
                     key=lambda ledger: ledger.header['start_batch'])
    recorded = [(record.epoch, record.indices.tolist()) for ledger in ledgers for record in ledger.trained]
    return recorded, trained


#: The allow-list docs/security.md shows.
DOCS_ALLOW_LIST = 'my_pkg,torch.optim'
#: ``my_pkg``: a package that allow-list admits, re-exporting what it must not reach (``os.system`` and friends).
ESCAPES_PACKAGE = {
    '__init__.py': (
        'import os\nimport subprocess\nfrom builtins import exec\nfrom functools import partial\n'
        'from os import system\n'
        'from pathlib import Path\nfrom my_pkg import sub\n\n\n'
        'def build(size: int = 3) -> list:\n    return list(range(size))\n\n\n'
        'class Runner:\n    run = staticmethod(os.system)\n\n    def go(self) -> None:\n        pass\n\n\n'
        'shell = partial(os.system)\nrunner = Runner()\n'
    ),
    'sub.py': 'from os import system\nimport torch.optim as optim\n',
}


def write_escapes_package(folder: Path) -> Path:
    """Write ``my_pkg`` (:data:`ESCAPES_PACKAGE`) into ``folder``; put ``folder`` on the path to import it."""
    (folder / 'my_pkg').mkdir()
    for name, text in ESCAPES_PACKAGE.items():
        (folder / 'my_pkg' / name).write_text(text)
    return folder


def states_equal(a: object, b: object) -> bool:
    """Nested training state (mappings, lists, tensors, numbers) equal, every tensor bit for bit (``torch.equal``).

    Example:
        >>> states_equal({'w': [torch.ones(2), 3]}, {'w': [torch.ones(2), 3]}), states_equal(torch.ones(1), 1.0)
        (True, False)
    """
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(states_equal(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(states_equal, a, b))
    return a == b
