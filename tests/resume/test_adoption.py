"""A checkpoint written without SamplerSync: the epoch in flight keeps its order, the data seed takes the next one.

Reseeding the samplers in the middle of an epoch would draw a new order for its
rest: samples trained before the checkpoint would come again and others never.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from composer.core import Callback
from torch.utils.data import DataLoader, DistributedSampler

from composer_sampling import SamplerSync

from support.helpers import checkpoint, synthetic
from support.helpers import train_with_ledger as train
from support.streaming_helpers import STREAMING_DEFAULT_SEED, streaming_loader, write_mds

pytestmark = pytest.mark.composer

SIZE, BATCH = 48, 8  # 6 batches per epoch


def loader() -> DataLoader:
    dataset = synthetic(SIZE)
    return DataLoader(dataset, batch_size=BATCH, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))


def test_the_epoch_in_flight_keeps_its_order_and_the_next_takes_the_data_seed(tmp_path: Path) -> None:
    without = train(loader(), '3ep', folder=tmp_path, sync=Callback())  # Composer alone: seed 0 every epoch
    synced = train(loader(), '3ep')  # SamplerSync from the start: the trainer seed 17
    with pytest.warns(UserWarning, match=r'written without SamplerSync; the rest of epoch 1 keeps the order its '
                                         r'samplers had \(seeds \[0\]\) and the data seed 17 applies from epoch 2'):
        adopted = train(loader(), '3ep', load=checkpoint(tmp_path, 8), folder=tmp_path / 'adopted')
    assert [b for b in adopted.batches if b[0] == 1] == [b for b in without.batches[8:] if b[0] == 1]
    assert [b for b in adopted.batches if b[0] == 2] == [b for b in synced.batches if b[0] == 2]

    again = train(loader(), '3ep', load=checkpoint(tmp_path / 'adopted', 10))  # saved inside the adopted epoch
    assert again.batches == adopted.batches[2:], 'a second resume inside that epoch keeps the same order'


def test_a_stream_keeps_the_shuffle_seed_it_resumed_with(tmp_path: Path) -> None:
    mds = write_mds(tmp_path / 'mds')
    without = train(streaming_loader(mds), '2ep', folder=tmp_path / 'run', sync=Callback())
    sync = SamplerSync()
    stream = streaming_loader(mds)
    with pytest.warns(UserWarning, match=f'keeps shuffle_seed {STREAMING_DEFAULT_SEED} it resumed with'):
        adopted = train(stream, '2ep', load=checkpoint(tmp_path / 'run', 5), sync=sync)
    assert adopted.batches == without.batches[5:]
    assert sync.seed_in_use == stream.dataset.shuffle_seed == STREAMING_DEFAULT_SEED
    assert sync.state_dict()['data_seed'] == STREAMING_DEFAULT_SEED
