"""Correct, reproducible and resumable data order for MosaicML Composer."""

from composer_sampling.callback import SamplerSync
from composer_sampling.graph import iter_samplers
from composer_sampling.samplers.resumable import ResumableDistributedSampler

__all__ = ['ResumableDistributedSampler', 'SamplerSync', 'iter_samplers']
