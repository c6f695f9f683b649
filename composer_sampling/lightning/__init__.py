"""The Lightning callback: :class:`SamplerSync` gives a Lightning ``Trainer`` the data order guarantees of the Composer
callback of the same name (the ``lightning`` extra: ``pip install 'composer-sampling[lightning]'``).

It works with ``lightning.pytorch`` and ``pytorch_lightning`` alike (with both
installed, one ``SamplerSync`` is a callback of both); docs/lightning.md says what it
guarantees and which Lightning internals it relies on.

* ``sampler_sync.py``: the callback;
* ``_state.py``: its checkpoint state, versioned, loadable with ``weights_only=True``;
* ``_compat.py``: the Lightning packages installed, and their ``Callback`` classes.
"""

from composer_sampling.lightning.sampler_sync import SamplerSync

__all__ = ['SamplerSync']
