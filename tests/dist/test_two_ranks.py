"""Tests that run as two ranks: launched by tests/neighbours/test_launcher.py as ``composer -n 2 -m pytest tests/dist``.

Every rank runs the same tests in the same order; results are compared across
ranks with ``composer.utils.dist.all_gather_object``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np

import pytest
from composer.utils import dist
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync
from composer_sampling.audit import audit_folder
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import train
from support.helpers import IndexLedger, make_trainer, synthetic

pytestmark = pytest.mark.world_size(2)

ROOT = Path(__file__).resolve().parents[2]
SIZE = 96


def _assert_epochs_partition_the_dataset(ledger: IndexLedger, size: int, epochs: int) -> None:
    per_rank = dist.all_gather_object(ledger.trained)
    assert len(per_rank) == 2
    for epoch in range(epochs):
        first, second = (set(trained[epoch]) for trained in per_rank)
        assert not first & second, f'epoch {epoch}: both ranks trained {sorted(first & second)[:5]}...'
        assert first | second == set(range(size)), f'epoch {epoch}: samples missing'
        assert len(per_rank[0][epoch]) == len(first)  # and no rank repeats a sample


def test_resumable_sampler_partitions_every_epoch_and_shares_the_trainer_seed() -> None:
    dataset = synthetic(SIZE)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    ledger = IndexLedger()
    make_trainer(loader, max_duration='3ep', seed=29, callbacks=[SamplerSync(), ledger], dist_timeout=60).fit()
    _assert_epochs_partition_the_dataset(ledger, SIZE, epochs=3)
    assert ledger.trained[0] != ledger.trained[1]
    assert dist.all_gather_object(ledger.seeds) == [[29], [29]]


def test_composers_own_sampler_gets_the_trainer_seed_on_both_ranks() -> None:
    dataset = synthetic(SIZE)
    loader = DataLoader(dataset, batch_size=8, sampler=dist.get_sampler(dataset))  # seed=0 unless told
    ledger = IndexLedger()
    make_trainer(loader, max_duration='2ep', seed=31, callbacks=[SamplerSync(), ledger], dist_timeout=60).fit()
    _assert_epochs_partition_the_dataset(ledger, SIZE, epochs=2)
    assert dist.all_gather_object(loader.sampler.seed) == [31, 31]


def test_custom_batch_sampler_recipe_runs_and_partitions() -> None:
    ledger = IndexLedger()
    recipe = load_recipe(ROOT / 'yamls' / 'custom-batch-sampler.yaml', ['max_duration=2ep'])
    result = train(recipe, callbacks=[ledger])
    _assert_epochs_partition_the_dataset(ledger, len(result.run.train_dataset), epochs=2)
    assert ledger.trained[0] != ledger.trained[1]
    assert dist.all_gather_object(sorted(set(ledger.seeds))) == [[17], [17]]


def test_composer_alone_refuses_the_custom_batch_sampler() -> None:
    dataset = synthetic(SIZE)
    inner = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_sampler=BatchShuffleSampler(BatchSampler(inner, 8, False)))
    with pytest.raises(ValueError, match='does not use DistributedSampler'):
        make_trainer(loader, device_train_microbatch_size=8, callbacks=[SamplerSync()], dist_timeout=60)


def test_a_sampler_that_does_not_really_shard_is_refused_on_every_rank() -> None:
    dataset = synthetic(SIZE)
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))
    ledger = IndexLedger()
    trainer = make_trainer(loader, callbacks=[SamplerSync(), ledger], dist_timeout=60)  # Composer accepts it
    with pytest.raises(ValueError, match=r'SamplerSync \(rank 0\).*shards for num_replicas=1, rank=0'):
        trainer.fit()
    assert not ledger.batches


def test_data_seeds_that_differ_between_ranks_are_refused() -> None:
    dataset = synthetic(SIZE)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    sync = SamplerSync(data_seed=dist.get_global_rank())
    trainer = make_trainer(loader, callbacks=[sync], dist_timeout=60)
    with pytest.raises(RuntimeError, match=r'the data seed differs between ranks \(\{0: 0, 1: 1\}\)'):
        trainer.fit()


def _recipe_ledger(name: str, *overrides: str):
    ledger = IndexLedger()
    result = train(load_recipe(ROOT / 'yamls' / name, list(overrides)), callbacks=[ledger])
    return result, ledger


def test_sub_epoch_recipe_covers_each_pass_once_across_ranks() -> None:
    result, ledger = _recipe_ledger('sub-epoch.yaml', 'max_duration=8ep', 'eval_interval=8ep')
    per_rank = dist.all_gather_object(ledger.trained)
    size = len(result.run.train_dataset)
    for data_epoch in range(2):
        everything = [i for trained in per_rank for sub in range(4) for i in trained[data_epoch * 4 + sub]]
        assert sorted(everything) == list(range(size)), f'data epoch {data_epoch}'


def test_mixture_recipe_keeps_ranks_on_one_source_per_step() -> None:
    result, ledger = _recipe_ledger('mixture.yaml', 'max_duration=2ep', 'eval_interval=2ep')
    # Items carry their index in the digits split; each source is a contiguous range of it.
    starts = [source.indices.start for source in result.run.train_dataset.datasets]
    per_rank = dist.all_gather_object(ledger.batches)
    assert len(per_rank[0]) == len(per_rank[1]) == 2 * 10  # 5 + 3 + 2 steps an epoch at global batch 128
    for (epoch, first), (_, second) in zip(per_rank[0], per_rank[1], strict=True):
        sources = {int(np.searchsorted(starts, i, side='right')) - 1 for i in first + second}
        assert len(sources) == 1, f'epoch {epoch}: a step mixes sources {sources}'
        assert not set(first) & set(second)


def test_nested_batch_recipe_partitions_every_epoch() -> None:
    result, ledger = _recipe_ledger('nested-batch.yaml', 'max_duration=2ep', 'eval_interval=2ep')
    _assert_epochs_partition_the_dataset(ledger, len(result.run.train_dataset), epochs=2)
    for epoch in range(2):
        sizes = [len(batch) for e, batch in ledger.batches if e == epoch]
        assert set(sizes[:-1]) == {32} and sum(sizes) == 719  # 4 inner batches of 8 joined; 1438 / 2 a rank


def _replicated_loader() -> DataLoader:
    """llm-foundry's replication 2 on two ranks: one sharding group, both ranks read the same data."""
    dataset = synthetic(SIZE)
    return DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset, num_replicas=1, rank=0))


def test_a_replication_layout_is_refused_unless_asked_for_and_names_the_fix() -> None:
    ledger = IndexLedger()
    trainer = make_trainer(_replicated_loader(), callbacks=[SamplerSync(), ledger], dist_timeout=60)
    with pytest.raises(ValueError, match=r'layout of replication 2 .*pass SamplerSync\(replication=2\)'):
        trainer.fit()
    assert not ledger.batches


def test_replication_accepts_exactly_its_layout() -> None:
    dataset = synthetic(SIZE)
    sharded = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    trainer = make_trainer(sharded, callbacks=[SamplerSync(replication=2)], dist_timeout=60)
    with pytest.raises(ValueError, match=r'expects num_replicas=1, rank=0 \(world size 2 / replication 2\)\. '
                                         r'SamplerSync\(replication=2\) says groups of 2 ranks read the same data.*'
                                         r'llm-foundry: replication: 2 under train_loader.dataset'):
        trainer.fit()
    ledger = IndexLedger()
    make_trainer(_replicated_loader(), max_duration='2ep', callbacks=[SamplerSync(replication=2), ledger],
                 dist_timeout=60).fit()
    first, second = dist.all_gather_object(ledger.batches)
    assert first == second, 'both ranks of a replication group train the same batches'
    for epoch in range(2):
        assert sorted(ledger.trained[epoch]) == list(range(SIZE))


def test_replication_resumes_at_the_sample_composer_counted_twice(tmp_path: Path) -> None:
    dist.initialize_dist('cpu', timeout=60)  # a no-op once a Trainer has done it
    folder = Path(dist.all_gather_object(str(tmp_path))[0])  # one folder for both ranks
    whole = IndexLedger()
    make_trainer(_replicated_loader(), max_duration='1ep', callbacks=[SamplerSync(replication=2), whole],
                 dist_timeout=60).fit()
    make_trainer(_replicated_loader(), max_duration='5ba', callbacks=[SamplerSync(replication=2)], dist_timeout=60,
                 save_folder=str(folder), save_interval='5ba').fit()
    resumed = IndexLedger()
    make_trainer(_replicated_loader(), max_duration='1ep', callbacks=[SamplerSync(replication=2), resumed],
                 dist_timeout=60, load_path=str(folder / 'ep0-ba5-rank0.pt')).fit()
    assert resumed.batches == whole.batches[5:]  # Composer's sample_in_epoch is 80: 40 samples, each read twice


def test_audit_counts_a_replication_group_once(tmp_path: Path) -> None:
    dist.initialize_dist('cpu', timeout=60)
    folder = Path(dist.all_gather_object(str(tmp_path))[0]) / 'ledger'
    make_trainer(_replicated_loader(), max_duration='2ep', dist_timeout=60,
                 callbacks=[SamplerSync(replication=2), SampleLedger(str(folder))]).fit()
    dist.barrier()
    report = audit_folder(folder)
    assert [(epoch.exactly_once, epoch.repeated, epoch.status) for epoch in report.epochs] == [(SIZE, 0, 'ok')] * 2


def test_the_ledger_reads_replication_from_the_samplers_layout(tmp_path: Path) -> None:
    """A dataset built with replication 2 and no SamplerSync(replication=...): each group is counted once."""
    dist.initialize_dist('cpu', timeout=60)
    folder = Path(dist.all_gather_object(str(tmp_path))[0]) / 'ledger'
    make_trainer(_replicated_loader(), max_duration='2ep', dist_timeout=60, callbacks=[SampleLedger(str(folder))]).fit()
    dist.barrier()
    report = audit_folder(folder)
    assert [(epoch.exactly_once, epoch.repeated, epoch.status) for epoch in report.epochs] == [(SIZE, 0, 'ok')] * 2


def test_a_recipe_with_replication_trains_the_same_data_on_both_ranks() -> None:
    result, ledger = _recipe_ledger('digits.yaml', 'max_duration=2ep', 'eval_interval=2ep',
                                    'callbacks.sampler_sync.replication=2')
    first, second = dist.all_gather_object(ledger.batches)
    assert first == second
    for epoch in range(2):
        assert sorted(ledger.trained[epoch]) == list(range(len(result.run.train_dataset)))


def test_a_remote_folder_rank_0_refuses_stops_every_rank_before_training(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only rank 0 lists the ledger folder in its object store, before the process group exists; once it does, every
    rank raises rank 0's refusal (here a store that does not answer), and no rank trains a batch."""
    dist.initialize_dist('cpu', timeout=60)
    with socket.socket() as unused:
        unused.bind(('127.0.0.1', 0))
        port = dist.all_gather_object(unused.getsockname()[1])[0]  # rank 0's: nothing listens there once closed
    for name, value in {'S3_ENDPOINT_URL': f'http://127.0.0.1:{port}', 'AWS_ACCESS_KEY_ID': 'k',
                        'AWS_SECRET_ACCESS_KEY': 's', 'AWS_DEFAULT_REGION': 'us-east-1', 'AWS_MAX_ATTEMPTS': '1',
                        'AWS_CONFIG_FILE': str(tmp_path / 'absent'), 'AWS_SHARED_CREDENTIALS_FILE': str(tmp_path / 'x'),
                        'AWS_EC2_METADATA_DISABLED': 'true'}.items():
        monkeypatch.setenv(name, value)
    ledger = IndexLedger()
    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', [f'save_folder={tmp_path / "run"}',
                                                          'callbacks.sample_ledger.folder=s3://bucket/ledger'])
    with pytest.raises(RecipeError, match=r'^callbacks.sample_ledger.folder: s3://bucket/ledger: the object store '
                                          rf'does not answer .*S3_ENDPOINT_URL=http://127.0.0.1:{port}'):
        train(recipe, callbacks=[ledger])
    assert not ledger.batches and not (tmp_path / 'run').exists()
