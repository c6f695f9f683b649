"""The Composer callbacks, one a module as in ``composer.callbacks``.

* :class:`SamplerSync` (``sampler_sync.py``): seeds, epochs and the resume
  position for every sampler of the train dataloader.
* :class:`SampleLedger` (``sample_ledger.py``): records which samples every rank
  trained, for ``composer-sampling audit``.
"""

from composer_sampling.callbacks.sample_ledger import SampleLedger
from composer_sampling.callbacks.sampler_sync import SamplerSync

__all__ = ['SampleLedger', 'SamplerSync']
