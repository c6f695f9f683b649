"""The sample ledger's recording, shared by the ledger callbacks of every trainer (no Composer, no Lightning).

What other folders may import, a module a line (a module whose name starts with an
underscore would be this folder's own):

* ``recorder``: the records of one rank's ledger file for one fit, held, checked and written
* ``sources``: where the sample indices of each trained batch come from (the tap at the top of
  the sampler graph, a stream's partition, or the batch itself), matched in order to the batches
* ``see_through``: a tap on top of a loader's batch sampler that a trainer's own probes of the graph see
  through, for a loader that no order object placed
* ``batch_indices``: the sample indices read from a collated batch, for ``index_key``
* ``stream_partition``: which samples each batch of a mosaicml-streaming ``StreamingDataset`` holds
* ``lineage``: the lineage, attempt and last batch a ledger keeps in its checkpoint state
* ``attempt``: one attempt's file opened, and the batches a trainer has trained recorded in it

The adapters (``callbacks/sample_ledger.py`` for Composer, ``lightning/sample_ledger.py``
for Lightning, ``transformers/sample_ledger.py`` for the Hugging Face Trainer) map their
trainer's events onto these and hand in what their trainer knows: where the tap goes, the
batch and its number, the epoch and the ranks.
"""
