"""The sampler graph: what a DataLoader draws its indices through, walked once and read.

What other folders may import, a module a line (a module whose name starts with an
underscore would be this folder's own):

* ``walk``: the one walk (:func:`~composer_sampling._graph.walk.walk`), the active root,
  the batch math read off a graph, the sharding check, the rendered tree
* ``grouping``: what a wrapper groups, under which attribute (:func:`~composer_sampling._graph.grouping.grouping`)
* ``accounting``: how one pass uses the dataset across all ranks (``EpochAccounting``), no torch
* ``snapshot``: one walk recorded per fit start (:class:`~composer_sampling._graph.snapshot.GraphSnapshot`)
* ``seeding``: which nodes carry a seed, and the seeds derived from the data seed
* ``signatures``: order signatures and the one resume check
* ``index_tap``: the one place we step in between a DataLoader and its graph
"""
