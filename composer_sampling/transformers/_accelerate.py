"""What accelerate makes of a train loader, and the one change the Hugging Face ``SamplerSync`` makes to it.

``Trainer.get_train_dataloader`` builds a torch ``DataLoader`` and hands it to
``accelerator.prepare``. On several processes, accelerate 1.16's
``prepare_data_loader`` returns a ``DataLoaderShard`` whose ``base_dataloader``
draws from a ``BatchSamplerShard``: that wrapper gives rank ``r`` the batches
``r, r + W, ...`` of the batch sampler below it. A graph that already shards by rank
(our samplers, ``distribute()``, a rank-aware sampler of yours) is split a second
time there, and every rank trains half of its share. transformers guards only its own
``BatchRebalanceSampler``, by setting ``num_processes=1, process_index=0`` on the
wrapper.

:func:`unshard` does the equivalent for every graph that shards by rank: the
``DataLoaderShard`` gets a ``base_dataloader`` with the same settings that draws from
the graph itself, without accelerate's wrapper. A graph that does not shard by rank is
left to accelerate: its wrapper is kept, as :class:`AcceleratedShards` (the same
class and iteration, with the rank and the world size under the names that the
sharding check reads). accelerate's ``SeedableRandomSampler``, which seeds every epoch
with ``seed + epoch`` (so that seed 43's epoch 0 is seed 42's epoch 1), becomes a torch
``RandomSampler`` whose generator the order seeds from the data seed and the epoch.

Example:
    >>> from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
    >>> shards = AcceleratedShards(BatchSampler(SequentialSampler(range(8)), 2, False), 2, 1)
    >>> (shards.num_replicas, shards.rank), list(shards)
    ((2, 1), [[2, 3], [6, 7]])
"""

from __future__ import annotations

from typing import Any

from accelerate.data_loader import BatchSamplerShard, DataLoaderDispatcher, DataLoaderShard, SeedableRandomSampler
from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from composer_sampling._graph.walk import iter_samplers, sharding_nodes
from composer_sampling.errors import DataOrderError
from composer_sampling.samplers.distribute import rebuild_loader

__all__ = ['AcceleratedShards', 'base_loader', 'replace_base', 'unshard']


class AcceleratedShards(BatchSamplerShard):
    """accelerate's ``BatchSamplerShard``, unchanged, with ``num_replicas`` and ``rank`` for the sharding check.

    Its order is the order of the batch sampler below it, which the data order gives
    every epoch: its own ``set_epoch`` has nothing to set.
    """

    @property
    def num_replicas(self) -> int:
        return int(self.num_processes)

    @property
    def rank(self) -> int:
        return int(self.process_index)

    def set_epoch(self, epoch: int) -> None:
        """Nothing of its own: the nodes below get the epoch from the data order."""


def base_loader(prepared: Any) -> DataLoader | None:
    """The torch ``DataLoader`` inside accelerate's ``DataLoaderShard`` (or ``DataLoaderDispatcher``); None for a
    loader accelerate did not prepare."""
    if isinstance(prepared, (DataLoaderShard, DataLoaderDispatcher)):
        return prepared.base_dataloader
    return None


def replace_base(prepared: Any, loader: DataLoader) -> None:
    """Make accelerate's ``DataLoaderShard`` draw from ``loader``, a loader with the same settings."""
    prepared.base_dataloader = loader


def unshard(prepared: Any, world_size: int) -> DataLoader:
    """Keep a graph that shards by rank from being split again by accelerate; the torch loader the data order owns.

    ``prepared`` is what ``Trainer.get_train_dataloader`` returned: accelerate's
    ``DataLoaderShard`` (its ``base_dataloader`` is replaced here), or a torch
    ``DataLoader`` that accelerate did not prepare (returned as it is).

    An iterable dataset orders itself, and accelerate shards it (``IterableDatasetShard``, or
    ``dispatch_batches``): its loader is returned as it is.

    Raises:
        DataOrderError: accelerate reads the batches of a map-style dataset on one rank (``dispatch_batches``),
            splits every batch (``split_batches``), or adapts a ``StatefulDataLoader``.
    """
    if isinstance(prepared, DataLoaderDispatcher) and not isinstance(prepared.dataset, IterableDataset):
        raise DataOrderError(
            "SamplerSync: accelerate's dispatch_batches=True (DataLoaderDispatcher) draws every batch on rank 0 and "
            'splits it between the ranks, so the ranks cannot be placed at their next sample after a checkpoint, and a '
            'sampler that already shards by rank would be split again. Pass TrainingArguments(accelerator_config='
            "{'dispatch_batches': False}) (the default for a map-style dataset)")
    base = base_loader(prepared)
    if base is None:
        if not isinstance(prepared, DataLoader):
            raise DataOrderError(f'SamplerSync: get_train_dataloader returned a {type(prepared).__name__}, not a '
                                 'torch DataLoader; return self.accelerator.prepare(DataLoader(...))')
        return prepared
    if type(base) is not DataLoader:
        raise DataOrderError(
            f"SamplerSync: accelerate adapts the train loader as a {type(base).__name__} (accelerator_config's "
            'use_stateful_dataloader=True), which SamplerSync does not place; leave use_stateful_dataloader False: '
            'SamplerSync places the loader at the next sample itself')
    attribute = 'sampler' if isinstance(base.sampler, BatchSamplerShard) else 'batch_sampler'
    shard = getattr(base, attribute)
    if not isinstance(shard, BatchSamplerShard) or isinstance(shard, AcceleratedShards):
        return base  # one process, an iterable dataset, or unsharded already
    below = shard.batch_sampler
    rank_aware = bool(sharding_nodes(below))
    if shard.split_batches:
        raise DataOrderError(
            "SamplerSync: accelerate's split_batches=True splits every batch of the train loader between the "
            f'{shard.num_processes} ranks'
            + (', and a sampler of this graph already shards by rank, so every rank would train a part of its own '
               'share only' if rank_aware else ', so a batch is not the unit a checkpoint counts')
            + ". Pass TrainingArguments(accelerator_config={'split_batches': False}), the default")
    if rank_aware:
        rebuilt = rebuild_loader(base, **{attribute: below, **({'batch_size': None} if attribute == 'sampler' else {})})
    else:
        if shard.num_processes != world_size:
            raise DataOrderError(f"SamplerSync: accelerate shards the train loader for {shard.num_processes} "
                                 f'processes, but the process group has {world_size} ranks')
        _unseed_accelerate(shard)
        rebuilt = rebuild_loader(base, **{attribute: AcceleratedShards(
            below, shard.num_processes, shard.process_index, shard.split_batches, shard.even_batches)})
    replace_base(prepared, rebuilt)
    return rebuilt


def _unseed_accelerate(shard: BatchSamplerShard) -> None:
    """Replace accelerate's ``SeedableRandomSampler`` below ``shard`` by a torch ``RandomSampler`` over the same
    data, whose generator the data order seeds."""
    replaced: dict[int, RandomSampler] = {}
    for node in list(iter_samplers(shard.batch_sampler)):
        child = getattr(node, 'sampler', None)
        if isinstance(child, SeedableRandomSampler):
            if id(child) not in replaced:
                replaced[id(child)] = RandomSampler(child.data_source, replacement=child.replacement,
                                                    num_samples=child._num_samples)
            node.sampler = replaced[id(child)]
