"""One capability model: Protocols read from their class, wrappers whose class is chosen once, one walk a fit start
as a graph of yours sees it."""

from __future__ import annotations

import ast
import copy
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from composer.core import Callback, State
from composer.loggers import Logger
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset, RandomSampler

import composer_sampling
from composer_sampling import (
    NestedBatchSampler,
    ResumableDistributedSampler,
    SampleLedger,
    SamplerSync,
    check_plan,
    distribute,
    protocols,
    summarize,
)
from composer_sampling._graph.snapshot import take_snapshot
from composer_sampling._proofs.plan import epoch_indices
from composer_sampling.samplers import DistributedBatchAdapter
from composer_sampling.samplers.nested import StatefulNestedBatchSampler

from support.helpers import IndexLedger, checkpoint, make_trainer, synthetic

PACKAGE = Path(composer_sampling.__file__).parent


# ---------------------------------------------------------------------------------------------------------------
# The capability checks: supports() and its TypeGuard agree.


def test_a_type_guard_narrows_and_agrees_with_supports() -> None:
    sampler: object = ResumableDistributedSampler(8, 1, 0)
    assert protocols.is_stateful(sampler)
    state = sampler.state_dict()  # narrowed: mypy accepts the call
    assert isinstance(state, dict)
    assert protocols.is_stateful(sampler) == protocols.supports(sampler, protocols.Stateful)


def test_no_code_assigns_an_objects_class() -> None:
    offenders = []
    for path in PACKAGE.rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(target, ast.Attribute) and target.attr == '__class__' for target in targets):
                offenders.append(f'{path.name}:{node.lineno}')
            if isinstance(node, ast.Call) and getattr(node.func, 'id', None) == 'setattr' and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value == '__class__':
                offenders.append(f'{path.name}:{node.lineno}')
    assert offenders == []


# ---------------------------------------------------------------------------------------------------------------
# Wrapper statefulness is decided when the wrapper is constructed, on the instance; the class never changes.


def test_a_wrapper_has_a_state_exactly_when_it_can_restore_one_and_keeps_its_class() -> None:
    ours = NestedBatchSampler(BatchSampler(ResumableDistributedSampler(12, 1, 0), 2, False), 2)
    theirs = NestedBatchSampler(BatchSampler(RandomSampler(range(12)), 2, False), 2)
    assert type(ours) is NestedBatchSampler and type(theirs) is NestedBatchSampler
    assert protocols.is_stateful(ours) and not hasattr(theirs, 'state_dict') and not hasattr(theirs, 'load_state_dict')
    for copied in (pickle.loads(pickle.dumps(ours)), copy.copy(ours), copy.deepcopy(ours)):
        assert protocols.is_stateful(copied) and list(copied) == list(ours)
        assert copied.state_dict.__self__ is copied  # the copy delegates to its own graph
    assert not hasattr(pickle.loads(pickle.dumps(theirs)), 'state_dict')
    adapter = DistributedBatchAdapter(BatchSampler(DistributedSampler(range(12), 2, 0), 2, False))
    assert type(pickle.loads(pickle.dumps(adapter))) is DistributedBatchAdapter and not hasattr(adapter, 'state_dict')


def test_a_stateful_class_over_a_graph_without_state_is_refused() -> None:
    with pytest.raises(TypeError, match='StatefulNestedBatchSampler needs every sampler below it'):
        StatefulNestedBatchSampler(BatchSampler(RandomSampler(range(12)), 2, False), 2)


def test_a_subclass_of_ours_stays_itself() -> None:
    class Mine(NestedBatchSampler):
        pass

    mine = Mine(BatchSampler(ResumableDistributedSampler(12, 1, 0), 2, False), 2)
    assert type(mine) is Mine


def test_distribute_builds_our_wrappers_through_their_constructors(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    original = NestedBatchSampler.__init__

    def counting(self: NestedBatchSampler, *args: Any, **kwargs: Any) -> None:
        built.append(args[0])
        original(self, *args, **kwargs)

    nested = NestedBatchSampler(BatchSampler(RandomSampler(range(30)), 3, False), 5)
    loader = DataLoader(range(30), batch_sampler=nested)
    monkeypatch.setattr(NestedBatchSampler, '__init__', counting)
    ranked = distribute(loader, num_replicas=2, rank=1)
    rebuilt = ranked.batch_sampler.batch_sampler
    assert protocols.is_stateful(rebuilt) and not hasattr(nested, 'state_dict')
    assert built == [rebuilt.batch_sampler] and isinstance(rebuilt.batch_sampler.sampler, ResumableDistributedSampler)
    assert nested.batch_sampler.sampler.__class__ is RandomSampler  # the input is untouched


def test_nested_refuses_an_index_sampler_when_built() -> None:
    for index_sampler in (RandomSampler(range(8)), ResumableDistributedSampler(8, 1, 0),
                          DistributedSampler(range(8), 1, 0)):
        with pytest.raises(TypeError, match=f'got the index sampler {type(index_sampler).__name__}; wrap it first'):
            NestedBatchSampler(index_sampler, 2)


# ---------------------------------------------------------------------------------------------------------------
# summarize of what it cannot summarize.


def test_summarize_names_a_non_dataloader_and_summarises_an_iterable_dataset() -> None:
    with pytest.raises(TypeError, match=r'summarize expects a torch DataLoader .*got list'):
        summarize([1, 2, 3])  # type: ignore[arg-type]

    class Stream(IterableDataset):
        shuffle_seed = 9176

        def __iter__(self) -> Any:
            return iter(range(4))

    text = summarize(DataLoader(Stream(), batch_size=2))
    assert 'Stream, an iterable dataset that orders itself' in text and '9176' in text


# ---------------------------------------------------------------------------------------------------------------
# A third-party sampler written only from docs/samplers.md ("Your own sampler: the contract"): no class of ours.


class DocSampler:
    """Copies the documented contract: EpochAware, Seeded, Offsettable, Sharded, EpochUsage, HasOrderSignature,
    PassPositions (which names ``seed`` and ``epoch``: plan groups ranks by them)."""

    def __init__(self, size: int, num_replicas: int, rank: int, seed: int = 0) -> None:
        self.size, self.num_replicas, self.rank, self.seed = size, num_replicas, rank, seed
        self.epoch = 0
        self._start = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch

    def set_sample_in_epoch(self, sample_in_epoch: int) -> None:
        self._start = sample_in_epoch

    def order_signature(self) -> dict[str, Any]:
        return {'sampler': 'DocSampler', 'dataset_len': self.size}

    def _total(self) -> int:
        return -(-self.size // self.num_replicas) * self.num_replicas

    def epoch_usage(self) -> tuple[int, int]:
        return self.size, self._total()

    def pass_positions(self) -> np.ndarray:
        return np.arange(self._start + self.rank, self._total(), self.num_replicas)

    def indices_at(self, positions: Any) -> np.ndarray:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
        return order[np.asarray(positions) % self.size]

    def __iter__(self) -> Any:
        positions = self.pass_positions()
        self._start = 0
        return iter(self.indices_at(positions).tolist())

    def __len__(self) -> int:
        return len(range(self.rank, self._total(), self.num_replicas))


def doc_loader(rank: int = 0, world_size: int = 1, size: int = 50) -> DataLoader:
    return DataLoader(synthetic(size), batch_size=4, sampler=DocSampler(size, world_size, rank))


def test_a_sampler_written_from_the_docs_has_the_documented_capabilities() -> None:
    sampler = DocSampler(10, 1, 0)
    for protocol in (protocols.EpochAware, protocols.Seeded, protocols.Offsettable, protocols.Sharded,
                     protocols.EpochUsage, protocols.HasOrderSignature, protocols.PassPositions):
        assert protocols.supports(sampler, protocol), protocol.__name__


def test_a_sampler_written_from_the_docs_plans() -> None:
    report = check_plan(doc_loader, world_size=3, epochs=2, seed=5)
    assert report.ok, report.problems
    assert [(epoch.missing, epoch.exactly_once) for epoch in report.epochs] == [(0, 49), (0, 49)]  # 1 padded
    loaders = [doc_loader(rank, 3) for rank in range(3)]
    for loader in loaders:
        loader.sampler.seed = 5
    expected = [np.asarray(list(loader.sampler)) for loader in loaders]
    assert [indices.tolist() for indices in epoch_indices(loaders, 0)] == [e.tolist() for e in expected]


def test_a_sampler_written_from_the_docs_trains_and_resumes(tmp_path: Path) -> None:
    whole = IndexLedger()
    make_trainer(doc_loader(), max_duration='2ep', callbacks=[SamplerSync(), whole]).fit()
    assert sorted(whole.trained[0]) == sorted(whole.trained[1]) == list(range(50))
    assert whole.trained[0] != whole.trained[1]
    make_trainer(doc_loader(), max_duration='5ba', callbacks=[SamplerSync()], save_folder=str(tmp_path),
                 save_interval='1ba').fit()
    start = _Resumption()
    resumed = IndexLedger()
    make_trainer(doc_loader(), max_duration='2ep', callbacks=[SamplerSync(), resumed, start],
                 load_path=str(checkpoint(tmp_path, 3))).fit()
    assert resumed.batches == whole.batches[3:]
    assert start.batch_in_epoch == 3 and start.spin_skipped  # continued at an offset, nothing loaded again


class _Resumption(Callback):
    """Records, at fit start, where the epoch starts and whether Composer's spin is switched off."""

    def __init__(self) -> None:
        self.batch_in_epoch = -1
        self.spin_skipped = False

    def fit_start(self, state: State, logger: Logger) -> None:
        self.batch_in_epoch = int(state.timestamp.batch_in_epoch)
        self.spin_skipped = bool(state.dataset_resumption.get('train'))


# ---------------------------------------------------------------------------------------------------------------
# One walk of the graph per fit start, as a graph of yours sees it.


class _WatchedBatches(BatchSampler):
    """A batch sampler of yours whose ``sampler`` attribute counts how often it is read; its own batching reads the
    sampler it wraps directly, so every read counted is a walk of the graph."""

    reads = 0

    @property  # type: ignore[override]
    def sampler(self) -> Any:
        type(self).reads += 1
        return self.__dict__['wrapped']

    @sampler.setter
    def sampler(self, value: Any) -> None:
        self.__dict__['wrapped'] = value

    def __iter__(self) -> Any:
        return iter(BatchSampler(self.__dict__['wrapped'], self.batch_size, self.drop_last))

    def __len__(self) -> int:
        return len(BatchSampler(self.__dict__['wrapped'], self.batch_size, self.drop_last))


class _FitStartReads(Callback):
    """Placed first and last in ``callbacks``: the reads between are what the other callbacks' fit start made."""

    def __init__(self, marks: list[int]) -> None:
        self.marks = marks

    def fit_start(self, state: State, logger: Logger) -> None:
        self.marks.append(_WatchedBatches.reads)


@pytest.mark.parametrize('build', ['batch sampler', 'nested'])
def test_a_fit_start_reads_your_graph_once_and_no_epoch_reads_it_again(build: str, tmp_path: Path) -> None:
    """SamplerSync and SampleLedger together read the ``sampler`` of a batch sampler of yours once, at fit start, and
    no epoch start reads it again; the run summary reads it once more, to draw the graph."""

    def loader() -> DataLoader:
        watched = _WatchedBatches(ResumableDistributedSampler(40, 1, 0), 2, False)
        top = watched if build == 'batch sampler' else DistributedBatchAdapter(NestedBatchSampler(watched, 2))
        return DataLoader(synthetic(40), batch_sampler=top)

    for callbacks, at_fit_start in (([SamplerSync(), SampleLedger(folder=str(tmp_path / 'a'))], 1),
                                    ([SamplerSync(print_summary=True), SampleLedger(folder=str(tmp_path / 'b'))], 2)):
        marks: list[int] = []
        _WatchedBatches.reads = 0
        make_trainer(loader(), max_duration='2ep', device_train_microbatch_size=4,
                     callbacks=[_FitStartReads(marks), *callbacks, _FitStartReads(marks)]).fit()
        assert (marks[1] - marks[0], _WatchedBatches.reads - marks[1]) == (at_fit_start, 0), callbacks


def test_a_snapshot_records_the_unused_sampler_and_the_datasets() -> None:
    from composer_sampling import PerSampleRNG

    data = PerSampleRNG(synthetic(8))
    loader = DataLoader(data, batch_sampler=BatchSampler(ResumableDistributedSampler(8, 1, 0), 2, False))
    snapshot = take_snapshot(loader)
    assert [type(node).__name__ for node in snapshot.unused] == ['SequentialSampler']
    assert snapshot.per_sample_rngs() == [data]
    assert [visit.path for visit in snapshot.visits] == ['batch_sampler', 'batch_sampler.sampler', 'sampler']
    assert snapshot.has(loader.batch_sampler.sampler, protocols.Offsettable)
