"""Where a fit continues an epoch: the resume decided, applied, and what both need, for any trainer (no Composer).

What other folders may import, one module per line (a module whose name starts with an
underscore would be this folder's own):

* ``decide``: how a fit that starts inside an epoch continues it
  (:class:`~composer_sampling._resume.decide.Continuation`: offset, window or spin)
* ``place``: the decision carried out on a graph (offsets and windows), whatever the trainer
* ``loaded``: the order state a checkpoint holds, one schema for every trainer, read and checked once
  (:class:`~composer_sampling._resume.loaded.LoadedOrder`)
* ``seeds``: the data seed every rank agrees on, and the seeds and epochs set on the graph
* ``ranks``: this process's rank among the others, and their object gather
* ``rng_state``: this process's random generators as plain values, captured and restored
* ``data_identity``: the train dataset's fingerprint every rank agrees on, checked against the checkpoint's
* ``redraw``: a graph that orders by nothing of ours, continued once its trained index lists drawn again match the
  checkpoint's digest
"""
