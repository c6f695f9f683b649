"""Samplers, one per module, each a thin layer over :mod:`composer_sampling.order`."""

from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.resumable import ResumableDistributedSampler

__all__ = ['DistributedBatchAdapter', 'ResumableDistributedSampler']
