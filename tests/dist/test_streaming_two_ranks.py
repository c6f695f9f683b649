"""SamplerSync with a mosaicml-streaming StreamingDataset on two ranks (``composer -n 2 -m pytest tests/dist``).

Rank 0 writes one MDS folder (96 samples) and both ranks read it; every StreamingDataset is built
on both ranks in the same order, since its constructor waits at a ``dist.barrier``. Each rank
trains 48 samples an epoch, 6 batches of 8.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from composer.utils import dist
from support.streaming_helpers import SIZE, streaming_loader, write_mds_once

from composer_sampling import SamplerSync

from support.helpers import IndexLedger, make_trainer

pytestmark = pytest.mark.world_size(2)


@pytest.fixture(scope='module')
def mds() -> Iterator[Path]:
    dist.initialize_dist('cpu', timeout=60)  # a no-op once a Trainer has done it
    folder = write_mds_once()
    yield folder
    dist.barrier()
    if dist.get_global_rank() == 0:
        shutil.rmtree(folder.parent, ignore_errors=True)


def _fit(folder: Path, seed: int, epochs: int) -> tuple[dict[int, list[int]], int]:
    """Train ``epochs`` with SamplerSync; this rank's sample indices per epoch, and its dataset's shuffle seed."""
    loader = streaming_loader(folder)
    ledger = IndexLedger()
    make_trainer(loader, max_duration=f'{epochs}ep', seed=seed, callbacks=[SamplerSync(), ledger],
                 dist_timeout=60).fit()
    return ledger.trained, loader.dataset.shuffle_seed


def _assert_epochs_partition_the_dataset(per_rank: list[dict[int, list[int]]], epochs: int) -> None:
    assert len(per_rank) == 2
    for epoch in range(epochs):
        first, second = (trained[epoch] for trained in per_rank)
        assert len(first) == len(second) == SIZE // 2, f'epoch {epoch}: {len(first)} and {len(second)} samples'
        assert not set(first) & set(second), f'epoch {epoch}: both ranks trained {sorted(set(first) & set(second))}'
        assert sorted(first + second) == list(range(SIZE)), f'epoch {epoch}: samples missing or repeated'


def test_ranks_partition_every_epoch_and_share_the_trainer_seed(mds: Path) -> None:
    trained, shuffle_seed = _fit(mds, seed=3, epochs=3)
    per_rank, seeds = dist.all_gather_object(trained), dist.all_gather_object(shuffle_seed)  # gather, then assert
    _assert_epochs_partition_the_dataset(per_rank, epochs=3)
    assert all(order[0] != order[1] != order[2] for order in per_rank), 'each epoch is a new order'
    assert seeds == [3, 3]


def test_another_trainer_seed_gives_another_order_on_both_ranks(mds: Path) -> None:
    three, _ = _fit(mds, seed=3, epochs=2)
    three_again, _ = _fit(mds, seed=3, epochs=2)
    four, shuffle_seed = _fit(mds, seed=4, epochs=2)
    per_rank, seeds = dist.all_gather_object((three, three_again, four)), dist.all_gather_object(shuffle_seed)
    assert seeds == [4, 4]
    _assert_epochs_partition_the_dataset([four for _, _, four in per_rank], epochs=2)
    assert all(three == three_again for three, three_again, _ in per_rank), 'the same seed, the same order'
    assert all(three != four for three, _, four in per_rank), 'trainer seeds 3 and 4 give the same order'


def test_a_stream_on_two_ranks_is_audited_exactly_once_against_its_global_size(mds: Path, tmp_path: Path) -> None:
    from composer_sampling import SampleLedger
    from composer_sampling.audit import audit_folder

    folder = Path(dist.all_gather_object(str(tmp_path))[0]) / 'ledger'
    make_trainer(streaming_loader(mds), max_duration='2ep', seed=3, dist_timeout=60,
                 callbacks=[SamplerSync(), SampleLedger(str(folder))]).fit()
    dist.barrier()
    report = audit_folder(folder)
    assert report.dataset_len == SIZE  # the stream's global size, not len() (its share of this rank)
    assert [(e.exactly_once, e.status) for e in report.epochs] == [(SIZE, 'ok')] * 2
