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
from composer_sampling._resume.ranks import Ranks
from composer_sampling.errors import DataOrderError

__all__ = ['agreed_fingerprint', 'check_data', 'fingerprint_entry', 'read_fingerprint']

def agreed_fingerprint(dataset: Any, ranks: Ranks) -> Fingerprint:
    """The fingerprint of the train dataset, the same on every rank (a collective of ``ranks``).

    When every rank has the same dataset, that dataset's fingerprint. When the ranks' datasets differ (a dataset
    built per rank), one fingerprint of all of them in rank order, which a resume on the same ranks reproduces; its
    sample count is the ranks' common count, or ``None`` when they differ.

    Every exception raised while a rank fingerprints its dataset is caught on that rank and gathered, so that every
    rank raises the same error, naming the first rank that failed, and none waits for the others in a collective.

    Raises:
        TypeError: on every rank, when a rank's dataset has an own ``fingerprint`` (or another attribute the
            fingerprint reads) that is not a string or raises; the message names the rank, the dataset's class and
            the exception.
        ValueError: on every rank, when a rank's chain of datasets loops, or fingerprinting it raised any other
            exception (named with the dataset's class).
    """
    problem: tuple[str, str] | None = None
    mine: Fingerprint | None = None
    failure: Exception | None = None
    try:
        mine = dataset_fingerprint(dataset)
    except (TypeError, ValueError) as error:
        problem, failure = (type(error).__name__, str(error)), error
    except Exception as error:  # any other failure: reported on every rank, never left to hang the gather
        problem, failure = ('ValueError', f'fingerprinting the train dataset {type(dataset).__name__} raised '
                                          f'{type(error).__name__}: {error}'), error
    gathered = ranks.all_gather((mine, problem))
    problems = [(rank, found) for rank, (_, found) in enumerate(gathered) if found]
    if problems:
        rank, (kind, text) = problems[0]
        refusal = (TypeError if kind == 'TypeError' else ValueError)(f'SamplerSync (rank {rank}): {text}')
        if rank == ranks.rank:
            raise refusal from failure
        raise refusal
    prints: list[Fingerprint] = [fingerprint for fingerprint, _ in gathered]
    if all(fingerprint == prints[0] for fingerprint in prints):
        return prints[0]
    digest = hashlib.blake2b(digest_size=16)
    for fingerprint in prints:
        digest.update(fingerprint.digest.encode())
    counts = {fingerprint.samples for fingerprint in prints}
    return Fingerprint(digest.hexdigest(), f'datasets of {len(prints)} ranks, which differ; rank 0 has the '
                                           f'{prints[0].source}', all(item.covers_content for item in prints),
                       counts.pop() if len(counts) == 1 else None)


def check_data(saved: Fingerprint | None, now: Fingerprint, allow_change: bool, *, mid_epoch: bool = False,
               required: bool = False, older_rules: bool = False) -> None:
    """Refuse a resume onto data whose fingerprint differs from the checkpoint's, or warn when ``allow_change``.

    When both fingerprints know the dataset's sample count and the counts differ, the
    refusal or the warning names the change of length. A change of length in the middle
    of an epoch is refused whatever ``allow_change`` says: the order of the epoch in
    flight is a function of the length, so the rest of that epoch cannot continue on the
    new length (it would repeat some samples and skip others).

    Args:
        saved: the checkpoint's fingerprint, or ``None`` when it has none.
        now: the fingerprint of the train dataset at this fit start.
        allow_change: continue on changed data, with a warning.
        mid_epoch: whether the resume continues an epoch in flight (the checkpoint was written after a batch that
            was not the epoch's last).
        required: the checkpoint's state is of a version that records the fingerprint at every fit, so a state
            without one was edited, or comes from a fit that placed no train loader; that is refused like a changed
            fingerprint. A state of an older version, written before the fingerprint existed, resumes with a note.
        older_rules: the saved fingerprint was computed by an earlier release's rules, which did not read the edges
            of local stream shards nor name a wrapper; a refusal then says so.

    Raises:
        DataOrderError: the fingerprints differ (or ``required`` and none was saved) and ``allow_change`` is
            false, or the sample counts differ and ``mid_epoch`` is true.

    Example:
        >>> before, after = Fingerprint('ab' * 16, 'a test', True, 27), Fingerprint('cd' * 16, 'a test', True, 26)
        >>> try:
        ...     check_data(before, after, allow_change=True, mid_epoch=True)
        ... except DataOrderError as error:
        ...     print(str(error).split(' (')[0])
        SamplerSync: the train dataset has 26 samples, the checkpoint trained on 27: a change of length
    """
    if saved is None and not required:
        warnings.warn(f'SamplerSync: the checkpoint carries no fingerprint of the train dataset because it was '
                      f'written before the fingerprint existed, so this resume cannot check that the data is the one '
                      f'it trained on; the checkpoints this run writes carry it: {now}', stacklevel=3)
        return
    ways_out = ('Resume with the data the checkpoint trained on, or pass SamplerSync(allow_data_change=True) (in a '
                'recipe or an llm-foundry YAML: callbacks.sampler_sync.allow_data_change: true) to continue on the '
                'new data')
    if saved is not None and saved.samples is not None and now.samples is not None and saved.samples != now.samples:
        length = (f'SamplerSync: the train dataset has {now.samples:,} samples, the checkpoint trained on '
                  f'{saved.samples:,}: a change of length (its fingerprint was {saved}, it is now {now})')
        if mid_epoch:
            raise DataOrderError(
                f'{length}. The checkpoint was written in the middle of an epoch, whose order is a function of the '
                f'dataset\'s length: the rest of that epoch cannot continue on {now.samples:,} samples, whatever '
                'allow_data_change says. Resume from a checkpoint written at the end of an epoch (allow_data_change '
                'then continues on the new data from the next epoch), or with the data the checkpoint trained on')
        if allow_change:
            warnings.warn(f'{length}. Continuing at the start of an epoch, because allow_data_change is true: its '
                          f'order is drawn over the {now.samples:,} samples', stacklevel=3)
            return
        raise DataOrderError(f'{length}. {ways_out} from the start of the next epoch')
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
    if older_rules and saved is not None:
        message += ('. The checkpoint was written by an earlier release, whose fingerprint read no stream shard files '
                    'and saw through every wrapper of one dataset: if the data is the same, continue once with '
                    'allow_data_change, and the checkpoints this run writes carry the new fingerprint')
    raise DataOrderError(f'{message}. {ways_out}')


def fingerprint_entry(fingerprint: Fingerprint | None) -> tuple[str, str, bool, int | None] | None:
    """The fingerprint as a checkpoint keeps it: one tuple of plain values (one entry of a sharded checkpoint),
    ``(digest, source, covers content, samples)``.

    Example:
        >>> fingerprint_entry(Fingerprint('ab' * 16, 'a test', True, 12))[1:]
        ('a test', True, 12)
    """
    return None if fingerprint is None else (fingerprint.digest, fingerprint.source, fingerprint.covers_content,
                                             fingerprint.samples)


def read_fingerprint(value: Any, name: str) -> Fingerprint | None:
    """A fingerprint back from :func:`fingerprint_entry`'s tuple (a list after some checkpoint formats), checked.

    The tuple of checkpoints written before the sample count was kept has three values, ``(digest, source, covers
    content)``; it reads with an unknown sample count.

    Raises:
        TypeError: ``value`` is not None nor a (digest, source, covers content) triple or a (digest, source, covers
            content, samples) 4-tuple of a 32-digit hexadecimal string, a string, a bool and None or an int of at
            least 0; the message names ``name``.

    Example:
        >>> read_fingerprint(None, 'data_fingerprint') is None
        True
        >>> read_fingerprint(('ab' * 16, 'a test', True), 'data_fingerprint').samples is None
        True
    """
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) in (3, 4) and Fingerprint.well_formed(*value):
        return Fingerprint(*value)
    raise TypeError(f'{name} must be None, a (digest, source, covers content) triple or a (digest, source, covers '
                    f'content, samples) 4-tuple of a 32-digit hexadecimal str, a str, a bool and None or an int >= 0, '
                    f'got {value!r:.200}')
