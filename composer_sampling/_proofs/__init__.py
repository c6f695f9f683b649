"""Proofs about an order: every sample once an epoch, by construction or counted, and the run summary.

What other folders may import, a module a line; the modules whose names start with
an underscore are this folder's own:

* ``plan``: :func:`~composer_sampling.check_plan`, any DataLoader's order at any world size
* ``coverage``: the coverage math and the one exactly-once verdict (plan, audit, ledger)
* ``counting``: 2-bit saturating counts and per-rank bitmaps
* ``summary``: the run summary (:func:`~composer_sampling.summarize`)
* ``progress``: the line on the terminal that a long count (``audit``, the counted proof) rewrites
* ``_construction``, ``_rank_shape``, ``_construction_guard``: the proof by construction,
  the rank graph it reads and the guard that checks the permutation on sampled positions
* ``_indices``, ``_workers``: the counted proof's indices of every rank (read as arrays
  where the sampler can say them, else iterated) and the worker processes that count them
"""
