"""Where a fit continues an epoch: the resume decided, applied, and what both need.

What other folders may import, a module a line (a module whose name starts with an
underscore would be this folder's own):

* ``decide``: how a fit that starts inside an epoch continues it
  (:class:`~composer_sampling._resume.decide.Continuation`: offset, window or spin)
* ``apply``: the decision carried out at fit start (offsets, taps, Composer's spin kept or switched off)
* ``loaded``: the SamplerSync state a checkpoint holds, read and checked once
  (:class:`~composer_sampling._resume.loaded.LoadedSync`)
* ``seeds``: the data seed every rank agrees on, and the seeds and epochs set on the graph
* ``fit``: what SamplerSync remembers of a fit
* ``fit_graph``: the train graph of the current fit, shared by the callbacks
* ``top_tap``: the tap at the top of a DataLoader, and the edge it sits on
* ``rng``: the checkpoint's RNG state, restored where Composer's spin would have
* ``remote_saves``: where a fit starts against the checkpoints its remote save folder holds
"""
