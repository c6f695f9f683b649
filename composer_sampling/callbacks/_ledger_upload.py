"""A ledger beside remote checkpoints: written in a local staging folder, uploaded whole through Composer's store.

When :class:`~composer_sampling.SampleLedger`'s folder is a URI (``{save_folder}/ledger``
of a remote save folder, or ``SampleLedger(folder='s3://...')``), each rank writes its
file ``{attempt}-rank{r}.bin`` in :func:`staging_folder` and uploads it, whole (an
object store cannot append), to ``{folder}/{attempt}-rank{r}.bin`` with the object
store Composer builds for that URI (``composer.utils.maybe_create_object_store_from_uri``).

When: :class:`UploadSchedule` says. Before every checkpoint Composer's
``CheckpointSaver`` is about to save (the ledger's handler of the checkpoint event runs
before the saver's when the saver comes later among the callbacks, as the Trainer
places the saver it builds from ``save_folder``), after any checkpoint it saved that
no upload covers yet, and at fit end.

Example:
    >>> schedule = UploadSchedule(covered=None)
    >>> schedule.due(saved=None, batch=3, saving=True)  # the saver is about to save batch 3: upload first
    3
    >>> schedule.covered = 3
    >>> schedule.due(saved=3, batch=4, saving=False) is None  # batch 3's checkpoint is covered
    True
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from composer.core import Event, State

    from composer_sampling._ledger.recorder import LedgerRecorder

__all__ = ['RECORD_BYTES', 'LedgerUploader', 'RemoteLedger', 'UploadSchedule', 'discard_staging', 'ledger_bytes',
           'saved_batch', 'staging_folder']

#: The bytes of a record besides its indices: epoch (u32), batch (i64), count (u32) and the record's CRC32.
RECORD_BYTES = 20
#: Before the header's JSON text: the magic (8 bytes) and its length (4); after it, its CRC32 (4).
_HEADER_FRAME = 16


def staging_folder(run_name: str, attempt: str) -> Path:
    """Where the ranks of one node write an attempt's files before uploading them: under the system's temp folder.

    Named by run and attempt, so two runs (or two attempts of one) never share a file;
    the run name is kept to letters, digits, ``.``, ``_`` and ``-`` (other characters
    become ``_``, at most 64 of them).

    Example:
        >>> staging_folder('my run/1', 'a1b2').name
        'composer-sampling-ledger-my_run_1-a1b2'
    """
    safe = re.sub(r'[^A-Za-z0-9._-]+', '_', run_name)[:64]
    return Path(tempfile.gettempdir()) / f'composer-sampling-ledger-{safe}-{attempt}'


def discard_staging(path: Path) -> None:
    """Remove a rank's staged file, and its staging folder once no rank of the node has a file left in it.

    Called at fit end after the last upload, and after Composer closes the trainer
    (``post_close``), so that a run that ends with an exception leaves nothing in the
    temp folder either. What the file held past its last upload is in no checkpoint:
    a resume trains those batches again, and ``audit`` would count them as superseded.

    Example:
        >>> folder = staging_folder('doc', 'a1')
        >>> folder.mkdir(exist_ok=True)
        >>> (folder / 'a1-rank0.bin').write_bytes(b'')
        0
        >>> discard_staging(folder / 'a1-rank0.bin')
        >>> folder.exists()
        False
    """
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # the last rank of the node to finish removes the staging folder


def ledger_bytes(header_text: int, batch_samples: list[int], index_bytes: int) -> int:
    """The size of a rank's ledger file: ``16 + header_text + sum(20 + index_bytes * n for n in batch_samples)``.

    ``header_text`` is the length of its JSON header (about 400 bytes), ``batch_samples``
    the samples of each batch the rank trained (and of each schedule record), ``index_bytes``
    4 for a dataset below 2**32 samples, else 8. The staging file holds the whole
    attempt, and every upload sends all of it.

    Example:
        >>> ledger_bytes(400, [32] * 100, 4)  # 100 batches of 32 samples
        15216
    """
    return _HEADER_FRAME + header_text + sum(RECORD_BYTES + index_bytes * samples for samples in batch_samples)


@dataclass
class UploadSchedule:
    """When to upload: before a checkpoint is saved, or after one no upload covers yet.

    ``covered`` is the batch of the last checkpoint an upload covers (every one of its
    batches had been recorded when the file was sent), or, at fit start, the saver's
    last checkpoint from before this fit (``None`` if none).
    """

    covered: int | None

    def due(self, saved: int | None, batch: int, saving: bool) -> int | None:
        """The checkpoint batch an upload made now covers, or ``None`` if none is due.

        Args:
            saved: the batch of the saver's last checkpoint (``None`` before its first).
            batch: the trainer's batch count now; every batch up to it has been recorded.
            saving: the saver is about to save the checkpoint of ``batch`` in this event.

        Example:
            >>> UploadSchedule(covered=3).due(saved=6, batch=7, saving=False)  # saved after the ledger's turn
            6
        """
        if saving and self.covered != batch:
            return batch
        if saved != self.covered:
            return saved
        return None


class RemoteLedger:
    """Uploads ledger files to the folder ``uri`` through the object store Composer builds for it.

    Args:
        uri (str): a URI Composer's ``maybe_create_object_store_from_uri`` accepts (``s3://bucket/run/ledger``).

    Example:
        >>> remote = RemoteLedger('s3://bucket/run/ledger')  # doctest: +SKIP
        >>> remote.object_name(Path('/tmp/x/a1-rank0.bin'))  # doctest: +SKIP
        'run/ledger/a1-rank0.bin'
    """

    def __init__(self, uri: str) -> None:
        from composer_sampling._stores.remote import RemoteError, object_store_of, split_uri

        try:
            store = object_store_of(uri)
        except RemoteError as error:
            raise ValueError(f'SampleLedger cannot upload its ledger to {error}') from None
        self.uri = uri
        self.store: Any = store
        self.prefix = split_uri(uri)[2].strip('/')

    def __repr__(self) -> str:
        return f'RemoteLedger({self.uri!r})'

    def object_name(self, path: Path) -> str:
        """The object a local ledger file is uploaded to: the same file name under the URI's path."""
        return f'{self.prefix}/{path.name}' if self.prefix else path.name

    def check(self) -> None:
        """List the folder once, so that a missing bucket or bad credentials stop the fit before it trains.

        Stores that cannot list are not checked here; their first upload is.
        """
        from composer_sampling._stores.remote import describe

        try:
            self.store.list_objects(f'{self.prefix}/' if self.prefix else '')
        except NotImplementedError:
            return
        except Exception as error:
            raise ValueError(f'SampleLedger cannot reach its ledger folder {describe(self.uri, error)}') from None

    def upload(self, path: Path) -> None:
        """Upload ``path`` whole, replacing the object of an earlier upload; transient errors are retried twice."""
        from composer.utils import ObjectStoreTransientError, retry

        name = self.object_name(path)

        @retry(ObjectStoreTransientError, num_attempts=3)
        def send() -> None:
            self.store.upload_object(object_name=name, filename=str(path))

        try:
            send()
        except Exception as error:
            from composer_sampling._stores.remote import describe

            target = f'{self.uri.rstrip("/")}/{path.name}'
            raise RuntimeError(f'SampleLedger could not upload its ledger {path}: {describe(target, error)}') from error


def saved_batch(saver: Any) -> int | None:
    """The batch of the last checkpoint that ``saver`` saved in this process, or ``None``."""
    saved = None if saver is None else saver.last_checkpoint_batch
    return None if saved is None else int(saved)


class LedgerUploader:
    """Uploads the ledger file of one fit to its remote folder when :class:`UploadSchedule` says, and at fit end.

    Args:
        remote: the remote folder.
        saver: the Trainer's ``CheckpointSaver``, or ``None`` if it has none.
    """

    def __init__(self, remote: RemoteLedger, saver: Any) -> None:
        self.remote = remote
        self.saver = saver
        self.schedule = UploadSchedule(covered=saved_batch(saver))
        self._sent: int | None = None  # the size of the file that the bucket has (the file only grows)

    def at_checkpoint(self, state: State, event: Event, ledger: Any, recorder: LedgerRecorder) -> None:
        """Upload before a checkpoint that the saver is about to save in this event, or after one that it saved.

        The saver's turn comes after the ledger's when it follows the ledger among the
        callbacks (the Trainer appends the saver that it builds from ``save_folder`` after
        the user's): then this asks the saver's ``save_interval``, as the saver is about to,
        whether it saves now. Composer's own intervals give the same answer to the same
        question twice.
        """
        saver = self.saver
        saving = False
        if saver is not None and state.callbacks.index(saver) > state.callbacks.index(ledger):
            batch = state.timestamp.batch
            saving = saver.last_checkpoint_batch != batch and bool(saver.save_interval(state, event))
        self.if_due(int(state.timestamp.batch), saving, recorder)

    def if_due(self, batch: int, saving: bool, recorder: LedgerRecorder) -> None:
        """Upload if a checkpoint saved, or about to be saved at ``batch``, is not covered yet."""
        covered = self.schedule.due(saved_batch(self.saver), batch, saving)
        if covered is not None:
            self.upload(recorder)
            self.schedule.covered = covered

    def upload(self, recorder: LedgerRecorder) -> None:
        """Upload the file unless the bucket has it as it is (it only grows: the same size is the same file)."""
        size = recorder.size()  # None before the first trained batch
        if size is not None and size != self._sent:
            self.remote.upload(recorder.path)
            self._sent = size

    def finish(self, recorder: LedgerRecorder) -> None:
        """At fit end: upload the file a last time, then remove it and, if it is empty, its staging folder."""
        path = recorder.path
        if path.exists():
            self.upload(recorder)  # before the saver's FIT_END waits for its uploads and uploads its last symlink
            discard_staging(path)
