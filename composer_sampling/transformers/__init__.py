"""The Hugging Face adapter: :class:`SamplerSync` gives a ``transformers.Trainer`` (or a subclass) the data order
guarantees of the Composer and Lightning callbacks (the ``transformers`` extra:
``pip install 'composer-sampling[transformers]'``).

Attach it with ``trainer = SamplerSync().attach(Trainer(...))``; docs/transformers.md
says what it guarantees and which transformers and accelerate internals it relies on.

* ``sampler_sync.py``: the callback, the trainer's events mapped onto the data order;
* ``_wiring.py``: the trainer methods it wraps, on the one instance it is attached to;
* ``_accelerate.py``: what accelerate makes of the train loader, and the second split undone;
* ``_loop.py``: where transformers' loop stands, at a checkpoint and after it;
* ``_state_files.py``: the order state of every rank in the checkpoint folder.
"""

from composer_sampling._requires import require

require('composer_sampling.transformers (SamplerSync for the Hugging Face Trainer)', ['transformers', 'accelerate'],
        'transformers')

from composer_sampling.transformers.sampler_sync import SamplerSync  # noqa: E402

__all__ = ['SamplerSync']
