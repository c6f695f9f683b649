"""Whether a resume continues on the data its checkpoint trained on: the train dataset's fingerprint, agreed by
every rank, against the one the checkpoint holds.

The indices a resume continues with are exact only over the same samples. A dataset
of the same length with other content (a re-tokenized shard, replaced files, sources
concatenated in another order) would pass every other check, so the fingerprint of
:mod:`composer_sampling._fingerprint` goes into every checkpoint and is compared at
fit start. Both callbacks, Composer's and Lightning's, call the two functions here.

Example:
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> from composer_sampling._resume.ranks import torch_ranks
    >>> now = agreed_fingerprint(TensorDataset(torch.arange(4)), torch_ranks())
    >>> check_data(now, now, allow_change=False)  # the same data: nothing to say
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

from composer_sampling._fingerprint import Fingerprint, dataset_fingerprint
from composer_sampling._resume.decide import ResumeRefusedError
from composer_sampling._resume.ranks import Ranks

__all__ = ['agreed_fingerprint', 'check_data', 'fingerprint_entry', 'read_fingerprint']

def agreed_fingerprint(dataset: Any, ranks: Ranks) -> Fingerprint:
    """The fingerprint of the train dataset, the same on every rank (a collective of ``ranks``).

    When every rank has the same dataset, that dataset's fingerprint. When the ranks' datasets differ (a dataset
    built per rank), one fingerprint of all of them in rank order, which a resume on the same ranks reproduces. A
    dataset whose own ``fingerprint`` is not a string is refused on every rank, naming the rank.
    """
    try:
        mine: Fingerprint | None = dataset_fingerprint(dataset)
        problem = None
    except (TypeError, ValueError) as error:
        mine, problem = None, str(error)
    gathered = ranks.all_gather((mine, problem))
    problems = [(rank, text) for rank, (_, text) in enumerate(gathered) if text]
    if problems:
        rank, text = problems[0]
        raise TypeError(f'SamplerSync (rank {rank}): {text}')
    prints = [fingerprint for fingerprint, _ in gathered]
    if all(fingerprint == prints[0] for fingerprint in prints):
        return prints[0]
    digest = hashlib.blake2b(digest_size=16)
    for fingerprint in prints:
        digest.update(fingerprint.digest.encode())
    return Fingerprint(digest.hexdigest(), f'datasets of {len(prints)} ranks, which differ; rank 0 has the '
                                           f'{prints[0].source}', all(item.covers_content for item in prints))


def check_data(saved: Fingerprint | None, now: Fingerprint, allow_change: bool, required: bool = False) -> None:
    """Refuse a resume onto data whose fingerprint differs from the checkpoint's, or warn when ``allow_change``.

    ``required``: the checkpoint's state is of a version that records the fingerprint at
    every fit, so a state without one was edited, or comes from a fit that placed no
    train loader; that is refused like a changed fingerprint. A state of an older
    version, written before the fingerprint existed, resumes with a note.

    Raises:
        ResumeRefusedError: the fingerprints differ (or ``required`` and none was saved) and ``allow_change`` is
            false.
    """
    if saved is None and not required:
        warnings.warn(f'SamplerSync: the checkpoint carries no fingerprint of the train dataset because it was '
                      f'written before the fingerprint existed, so this resume cannot check that the data is the one '
                      f'it trained on; the checkpoints this run writes carry it: {now}', stacklevel=3)
        return
    if saved is not None and saved.digest == now.digest:
        return
    if saved is None:
        message = ('SamplerSync: the checkpoint\'s state holds no data_fingerprint (None), though its version records '
                   'the train dataset\'s fingerprint at every fit: it was edited, or saved before any fit placed the '
                   f'train dataloader, so this resume cannot check that the data is the one it trained on; the data '
                   f'is now {now}')
    else:
        message = (f'SamplerSync: the train dataset is not the one the checkpoint trained on: its fingerprint was '
                   f'{saved}, it is now {now}; the resumed indices would continue onto other samples')
    if allow_change:
        warnings.warn(f'{message}. Continuing, because allow_data_change is true', stacklevel=3)
        return
    raise ResumeRefusedError(f'{message}. Resume with the data the checkpoint trained on, or pass '
                             'SamplerSync(allow_data_change=True) (in a recipe or an llm-foundry YAML: '
                             'callbacks.sampler_sync.allow_data_change: true) to continue on the new data')


def fingerprint_entry(fingerprint: Fingerprint | None) -> tuple[str, str, bool] | None:
    """The fingerprint as a checkpoint keeps it: one tuple of plain values (one entry of a sharded checkpoint).

    Example:
        >>> fingerprint_entry(Fingerprint('ab' * 16, 'a test', True))[1:]
        ('a test', True)
    """
    return None if fingerprint is None else (fingerprint.digest, fingerprint.source, fingerprint.covers_content)


def read_fingerprint(value: Any, name: str) -> Fingerprint | None:
    """A fingerprint back from :func:`fingerprint_entry`'s tuple (a list after some checkpoint formats), checked.

    Raises:
        TypeError: ``value`` is not None nor a (digest, source, covers content) triple of a 32-digit hexadecimal
            string, a string and a bool; the message names ``name``.

    Example:
        >>> read_fingerprint(None, 'data_fingerprint') is None
        True
    """
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 3 and Fingerprint.well_formed(*value):
        return Fingerprint(*value)
    raise TypeError(f'{name} must be None or a (digest, source, covers content) triple of a 32-digit hexadecimal '
                    f'str, a str and a bool, got {value!r:.200}')
