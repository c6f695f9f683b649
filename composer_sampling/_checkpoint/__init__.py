"""Checkpoints: the envelope of every state of ours, and a checkpoint checked before Composer unpickles it.

What other folders may import, a module a line (a module whose name starts with an
underscore would be this folder's own):

* ``envelope``: one layout and one version policy for every checkpoint state of ours
* ``safe_load``: a checkpoint loaded with ``weights_only=True`` at the path Composer resolves
  (:func:`~composer_sampling.check_checkpoint`)
* ``sharded``: a sharded checkpoint (a ``torch.distributed.checkpoint`` folder) read without running its code
* ``import_names``: ``'module:attribute'`` names, the one pattern and importer
* ``save_folder``: what a local save folder holds after the checkpoint a fit resumes, and the one file a save cut
  short, set aside (the runner and the callbacks make this one decision)
"""
