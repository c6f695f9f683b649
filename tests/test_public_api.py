"""Plan and summary from Python, for users without a recipe; the public names of the design."""

from __future__ import annotations

import importlib.metadata

import pytest
from torch.utils.data import DataLoader, DistributedSampler

import composer_sampling
from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync, check_plan, summarize

from support.helpers import make_trainer, synthetic

DESIGN_NAMES = ['SamplerSync', 'iter_samplers', 'ResumableDistributedSampler', 'SubEpochDistributedSampler',
                'MixtureDistributedSampler', 'NestedBatchSampler', 'distribute', 'summarize', 'check_plan',
                '__version__']


def test_the_public_names_of_the_design_import() -> None:
    for name in DESIGN_NAMES:
        assert getattr(composer_sampling, name) is not None, name
        assert name in composer_sampling.__all__
    assert composer_sampling.__version__ == importlib.metadata.version('composer-sampling')


def _loader(rank: int, world_size: int, size: int = 100) -> DataLoader:
    sampler = ResumableDistributedSampler(size, num_replicas=world_size, rank=rank)
    return DataLoader(range(size), batch_size=10, sampler=sampler)


def test_check_plan_passes_a_sharded_loader_and_reports_padding() -> None:
    report = check_plan(_loader, world_size=8, epochs=3, seed=9)
    assert report.ok, report.problems
    assert [epoch.repeated for epoch in report.epochs] == [4, 4, 4]  # 100 samples padded to 104 over 8 ranks
    assert report.data_seed == 9 and report.batch_sizes.global_batch == 80
    assert report.plan is report.batch_sizes  # the old name, kept read-only for callers of the public check_plan
    with pytest.raises(AttributeError):
        report.plan = report.batch_sizes  # type: ignore[misc]


def test_check_plan_reports_a_loader_that_does_not_shard_without_raising() -> None:
    def everyone_reads_everything(rank: int, world_size: int) -> DataLoader:
        return DataLoader(range(50), batch_size=5, sampler=DistributedSampler(range(50), num_replicas=1, rank=0))

    report = check_plan(everyone_reads_everything, world_size=2)
    assert not report.ok
    assert report.problems[0].startswith('real sharding (rank 0):')
    assert 'SamplerSync(replication=2)' in report.problems[0]


def test_check_plan_with_replication_counts_each_group_once() -> None:
    def replicated(rank: int, world_size: int) -> DataLoader:
        return _loader(rank // 2, world_size // 2)

    report = check_plan(replicated, world_size=4, replication=2)
    assert report.ok, report.problems
    assert [epoch.exactly_once for epoch in report.epochs] == [100, 100]


@pytest.mark.parametrize(
    ('kwargs', 'error', 'message'),
    [
        ({'world_size': 0}, ValueError, r'world_size must be in the interval \[1, inf\), got 0'),
        ({'world_size': 3, 'replication': 2}, ValueError, 'replication=2 does not divide the world size 3'),
        ({'world_size': 2, 'epochs': 0}, ValueError, 'epochs must be in the interval'),
    ],
)
def test_check_plan_bad_arguments(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        check_plan(_loader, **kwargs)


def test_check_plan_refuses_what_is_not_a_dataloader() -> None:
    with pytest.raises(TypeError, match=r'make_loader\(0, 1\) must return a DataLoader'):
        check_plan(lambda rank, world_size: [1, 2], world_size=1)


def test_summarize_any_dataloader() -> None:
    text = summarize(_loader(1, 4), data_seed=3)
    assert 'samples per epoch  100 of 100 (0 padded, 0 dropped)' in text
    assert 'data seed          3' in text
    assert 'ResumableDistributedSampler(num_replicas=4, rank=1' in text


def test_sampler_sync_prints_the_summary_once_when_asked(capsys) -> None:
    dataset = synthetic()
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    make_trainer(loader, max_duration='2ep', seed=23, callbacks=[SamplerSync(print_summary=True)]).fit()
    out = capsys.readouterr().out
    assert out.count('composer-sampling run summary') == 1
    assert 'data seed          23 (the trainer seed)' in out
    make_trainer(loader, max_duration='1ep', callbacks=[SamplerSync()]).fit()
    assert 'run summary' not in capsys.readouterr().out


def test_callbacks_have_useful_reprs(tmp_path) -> None:
    assert repr(SampleLedger(str(tmp_path), index_key='idx')) == f"SampleLedger(folder='{tmp_path}', index_key='idx')"
    assert 'print_summary=True' in repr(SamplerSync(print_summary=True))
