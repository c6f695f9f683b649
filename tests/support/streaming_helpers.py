"""Real mosaicml-streaming parts for the tests: a small MDS folder, and StreamingDatasets and loaders over it.

Every sample is written in the dict form the demo MLP trains on, ``{'input': float32[64],
'target': int, 'index': int}`` (samples ``0..size-1`` of the demo ``SyntheticDataset``), so the
default collate gives the batches ``MLPClassifier`` and ``IndexLedger`` read; no collate_fn needed.

Shared memory: every ``StreamingDataset`` registers its own shared-memory prefix (``000000_locals``,
``000000_resume``, ...) and keeps it until the process exits (streaming frees it in an ``atexit``
handler, never when the dataset is garbage collected). A new dataset in the same process therefore
always gets a fresh prefix, so many datasets over the same local folder coexist in one pytest
process without ``clean_stale_shared_memory()``; that function would also unlink the shared memory
of any other process using streaming on this machine, so the tests never call it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from composer.utils import dist
from streaming import MDSWriter, StreamingDataset
from torch.utils.data import DataLoader

from composer_sampling.recipes.demo.data import NUM_FEATURES, SyntheticDataset

SIZE = 96
BATCH = 8
STREAMING_DEFAULT_SEED = 9176  # StreamingDataset's default shuffle_seed
COLUMNS = {'input': f'ndarray:float32:{NUM_FEATURES}', 'target': 'int', 'index': 'int'}
SHARD_BYTES = 1 << 11  # about 7 samples a shard: 14 shards for 96 samples, so the shuffle crosses shards


def write_mds(folder: Path, size: int = SIZE, seed: int = 0, hashes: tuple[str, ...] = ()) -> Path:
    """Write ``size`` samples of the demo synthetic data drawn with ``seed`` as MDS shards into ``folder`` (which
    must not exist), their index recording the ``hashes`` of every shard."""
    source = SyntheticDataset(size, seed=seed)
    with MDSWriter(out=str(folder), columns=COLUMNS, size_limit=SHARD_BYTES, hashes=list(hashes)) as writer:
        for index in range(size):
            sample = source[index]
            writer.write({'input': sample['input'].numpy(), 'target': int(sample['target']), 'index': index})
    return folder


def write_mds_once(size: int = SIZE) -> Path:
    """On every rank: the same MDS folder, written by rank 0 alone under a temporary directory rank 0 made."""
    folder = None
    if dist.get_global_rank() == 0:
        folder = write_mds(Path(tempfile.mkdtemp(prefix='mds-')) / 'data', size)
    folder = dist.all_gather_object(None if folder is None else str(folder))[0]
    dist.barrier()
    return Path(folder)


def streaming_dataset(folder: Path, *, batch_size: int = BATCH, **kwargs: Any) -> StreamingDataset:
    """A shuffled ``StreamingDataset`` over the local MDS ``folder``; ``kwargs`` go to ``StreamingDataset``."""
    kwargs.setdefault('shuffle', True)
    return StreamingDataset(local=str(folder), batch_size=batch_size, **kwargs)


def streaming_loader(folder: Path, *, batch_size: int = BATCH, num_workers: int = 0, **kwargs: Any) -> DataLoader:
    """A ``DataLoader`` over a new ``streaming_dataset`` of ``folder``; ``kwargs`` go to the dataset."""
    dataset = streaming_dataset(folder, batch_size=batch_size, **kwargs)
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
