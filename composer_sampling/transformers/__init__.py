"""The Hugging Face adapters: :class:`SamplerSync` gives a ``transformers.Trainer`` (or a subclass) the data order
guarantees of the Composer and Lightning callbacks, and :class:`SampleLedger` records what it trained for
``composer-sampling audit`` (the ``transformers`` extra: ``pip install 'composer-sampling[transformers]'``).

Attach them with ``trainer = SampleLedger(folder).attach(SamplerSync().attach(Trainer(...)))``;
docs/transformers.md says what they guarantee and which transformers and accelerate internals
they rely on.

* ``sampler_sync.py``: the order callback, the trainer's events mapped onto the data order;
* ``sample_ledger.py``: the ledger callback, the trainer's events mapped onto the ledger recording;
* ``_wiring.py``: the trainer methods the order callback wraps, on the one instance it is attached to;
* ``_ledger_wiring.py``: the trainer methods the ledger wraps, on the one instance it is attached to;
* ``_accelerate.py``: what accelerate makes of the train loader, and the second split undone;
* ``_loop.py``: where transformers' loop stands, at a checkpoint and after it;
* ``_state_files.py``: the states of the order and of the ledger of every rank in the checkpoint folder.
"""

from composer_sampling._requires import require

require('composer_sampling.transformers (SamplerSync and SampleLedger for the Hugging Face Trainer)',
        ['transformers', 'accelerate'], 'transformers')

from composer_sampling.transformers.sample_ledger import SampleLedger  # noqa: E402
from composer_sampling.transformers.sampler_sync import SamplerSync  # noqa: E402

__all__ = ['SampleLedger', 'SamplerSync']
