"""The Composer callbacks, one module per callback as in ``composer.callbacks`` (the ``composer`` extra).

* :class:`SamplerSync` (``sampler_sync.py``): seeds, epochs and the resume
  position for every sampler of the train dataloader.
* :class:`SampleLedger` (``sample_ledger.py``): records which samples every rank
  trained, for ``composer-sampling audit``. It wires Composer's events to the ledger's
  recording, which every trainer shares (``composer_sampling/_ledger/``: the indices of
  each batch, the records, the lineage in the checkpoint state), and to its Composer
  helpers: ``_ledger_upload.py`` uploads the file to an object store, and
  ``_ledger_folder.py`` says where the file goes.

A Trainer takes one instance of each callback; a second one is a ``ValueError`` when the
Trainer is built (``_one_per_trainer.py``).
"""

from composer_sampling._requires import require

require('composer_sampling.callbacks (SamplerSync, SampleLedger)', ['composer'], 'composer',
        'With Lightning, use composer_sampling.lightning.SamplerSync and SampleLedger (pip install '
        "'composer-sampling[lightning]'); in a loop of your own or with Lightning Fabric, composer_sampling.DataOrder")

from composer_sampling.callbacks.sample_ledger import SampleLedger  # noqa: E402 (once Composer is known to be there)
from composer_sampling.callbacks.sampler_sync import SamplerSync  # noqa: E402

__all__ = ['SampleLedger', 'SamplerSync']
