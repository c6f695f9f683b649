"""The Lightning callbacks: :class:`SamplerSync` gives a Lightning ``Trainer`` the data order guarantees of the Composer
callback of the same name, and :class:`SampleLedger` records which samples every rank trained, for
``composer-sampling audit`` (the ``lightning`` extra: ``pip install 'composer-sampling[lightning]'``).

It works with ``lightning.pytorch`` and ``pytorch_lightning`` alike (with both
installed, each of these callbacks is a callback of both); docs/lightning.md says what it
guarantees and which Lightning internals it relies on.

* ``sampler_sync.py``: the order callback, Lightning's events mapped onto ``DataOrder``;
* ``sample_ledger.py``: the ledger callback, Lightning's events mapped onto the ledger's recording
  (``composer_sampling/_ledger/``);
* ``_loop.py``: where Lightning's fit loop stands at a checkpoint, and where it resumes;
* ``_process.py``: a callback's wrapper of the strategy's ``process_dataloader`` for one fit;
* ``_compat.py``: the Lightning packages installed, and their ``Callback`` classes.
"""

from composer_sampling.lightning.sample_ledger import SampleLedger
from composer_sampling.lightning.sampler_sync import SamplerSync

__all__ = ['SampleLedger', 'SamplerSync']
