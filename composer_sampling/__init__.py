"""Correct, reproducible and resumable data order for MosaicML Composer."""

from composer_sampling.callback import SamplerSync
from composer_sampling.distribute import distribute
from composer_sampling.graph import iter_samplers
from composer_sampling.sample_ledger import SampleLedger
from composer_sampling.samplers.mixture import MixtureDistributedSampler
from composer_sampling.samplers.nested import NestedBatchSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler
from composer_sampling.samplers.sub_epoch import SubEpochDistributedSampler

__all__ = [
    'MixtureDistributedSampler',
    'NestedBatchSampler',
    'ResumableDistributedSampler',
    'SampleLedger',
    'SamplerSync',
    'SubEpochDistributedSampler',
    'distribute',
    'iter_samplers',
]
