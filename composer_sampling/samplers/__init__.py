"""Samplers, one per module, each a thin layer over the `permutation` and `positions` modules."""

from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.mixture import MixtureDistributedSampler
from composer_sampling.samplers.nested import NestedBatchSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler
from composer_sampling.samplers.sub_epoch import SubEpochDistributedSampler

__all__ = [
    'DistributedBatchAdapter',
    'MixtureDistributedSampler',
    'NestedBatchSampler',
    'ResumableDistributedSampler',
    'SubEpochDistributedSampler',
]
