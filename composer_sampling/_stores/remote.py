"""Reading a run's files from an object store, through Composer's own object stores and download path.

``audit`` of a URI lists and downloads the ledger objects (:func:`download_folder`);
a remote ``load_path`` is fetched as Composer's ``get_file`` fetches it (:func:`download_file`),
the function Composer's ``download_checkpoint`` calls, so the bytes checked are the
bytes Composer would have read. Composer's ``.symlink`` pointers are followed the way
``get_file`` follows them, but a bounded number of times (:func:`resolve_pointers`). A
URI whose scheme Composer has no object store for is refused naming the scheme; what
goes wrong on the way (a missing bucket, no credentials found, credentials the
server refuses, a server that does not answer, a broken pointer) is a
:class:`RemoteError` naming the URI and what to check, never a traceback.

Example:
    >>> object_store_of('nosuch://bucket/run')
    Traceback (most recent call last):
    ...
    composer_sampling._stores.remote.RemoteError: nosuch://bucket/run: Composer has no object store for nosuch:// ...
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

__all__ = ['RemoteError', 'describe', 'download_file', 'download_folder', 'is_missing_object', 'object_exists',
           'object_store_of', 'reader_of', 'resolve_pointers', 'split_uri']

#: S3 error codes (botocore's ``Error.Code``) that mean the keys are wrong or not allowed.
_CREDENTIAL_CODES = ('SignatureDoesNotMatch', 'InvalidAccessKeyId', 'AccessDenied', 'InvalidToken',
                     'ExpiredToken', '403')
_CREDENTIALS_HINT = ('check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the profile) and that '
                     'they may read this bucket')

_MISSING_CREDENTIALS_HINT = ('set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile, for '
                             'an identity that may read this bucket')


class RemoteError(ValueError):
    """An object store that cannot be reached or read: names the URI and what to check."""


def split_uri(uri: str) -> tuple[str, str, str]:
    """``(scheme, bucket, key)`` of ``uri``, as Composer's ``parse_uri`` splits it.

    Example:
        >>> split_uri('s3://bucket/runs/digits/')
        ('s3', 'bucket', 'runs/digits/')
    """
    parsed = urlparse(uri.replace('AZURE_BLOBS', 'azure'))  # urlparse refuses an underscore in a scheme
    bucket = parsed.netloc.split('@')[0]
    return parsed.scheme, bucket, parsed.path.lstrip('/') if parsed.scheme else parsed.path


def reader_of(uri: str) -> Any:
    """A store to read ``uri`` from: boto3 directly for ``s3://``, without importing Composer; else
    :func:`object_store_of`.

    Example:
        >>> reader_of('s3://bucket/run')  # doctest: +SKIP
        S3Reader('bucket')
    """
    scheme, bucket, _ = split_uri(uri)
    if scheme != 's3':
        return object_store_of(uri)
    from composer_sampling._stores.s3_reader import S3Reader

    try:
        return S3Reader(bucket)
    except ImportError as error:
        raise RemoteError(f'{uri}: the client library for s3:// is not installed ({error}); install boto3 to read '
                          's3://') from None


def object_store_of(uri: str) -> Any:
    """Composer's object store for ``uri`` (``maybe_create_object_store_from_uri``), or a :class:`RemoteError`.

    A scheme Composer has no object store for, a client library that is not
    installed, or a store that cannot be set up (missing credentials) is named.
    """
    scheme = urlparse(uri).scheme
    try:
        from composer.utils import maybe_create_object_store_from_uri

        store = maybe_create_object_store_from_uri(uri)
    except NotImplementedError:
        raise RemoteError(f'{uri}: Composer has no object store for {scheme}:// (it reads s3://, gs://, oci://, '
                          'azure://, dbfs:/Volumes and local paths); copy the files to a local folder or one of those '
                          'stores') from None
    except ImportError as error:
        raise RemoteError(f'{uri}: the client library for {scheme}:// is not installed ({error}); install it to '
                          f'read {scheme}:// through Composer') from None
    except Exception as error:  # a store that checks its credentials or settings when built (gs://, oci://)
        raise RemoteError(f'{uri}: the {scheme}:// object store cannot be set up ({type(error).__name__}: '
                          f'{_first_line(error)}); check its credentials and settings') from None
    if store is None:
        raise RemoteError(f'{uri} is not a URI of an object store')
    return store


def describe(uri: str, error: BaseException) -> RemoteError:
    """``error`` from an object store, as a :class:`RemoteError` naming ``uri`` and what to check."""
    cause: BaseException | None = error
    while cause is not None:  # Composer wraps S3's 403 and 404 in FileNotFoundError: the cause says which
        code = _error_code(cause)
        if code == 'NoSuchBucket':
            return RemoteError(f'{uri}: the bucket {split_uri(uri)[1]!r} does not exist at this endpoint; check the '
                               'bucket name (and S3_ENDPOINT_URL, if set)')
        if type(cause).__name__ == 'NoCredentialsError':  # nothing was sent: the client found no keys at all
            return RemoteError(f'{uri}: no credentials were found for the object store (NoCredentialsError); '
                               f'{_MISSING_CREDENTIALS_HINT}')
        if type(cause).__name__ == 'PartialCredentialsError':
            return RemoteError(f'{uri}: the credentials found are incomplete ({_first_line(cause)}); '
                               f'{_MISSING_CREDENTIALS_HINT}')
        if code in _CREDENTIAL_CODES:  # the server answered and refused the keys it was sent
            return RemoteError(f'{uri}: the object store refuses the credentials ({code}); {_CREDENTIALS_HINT}')
        if type(cause).__name__ in ('EndpointConnectionError', 'ConnectTimeoutError', 'ReadTimeoutError',
                                    'ConnectionClosedError') or isinstance(cause, ConnectionError):
            endpoint = os.environ.get('S3_ENDPOINT_URL')
            where = f'S3_ENDPOINT_URL={endpoint}' if endpoint and uri.startswith('s3:') else 'the endpoint'
            return RemoteError(f'{uri}: the object store does not answer ({_first_line(cause)}); check that {where} '
                               'is right and the server is running, and the network')
        cause = cause.__cause__ or cause.__context__
    if isinstance(error, FileNotFoundError):
        return RemoteError(f'{uri} does not exist in its object store; check the path')
    return RemoteError(f'{uri}: the object store failed ({type(error).__name__}: {_first_line(error)})')


def is_missing_object(error: BaseException) -> bool:
    """Whether ``error`` says only that an object is not there (not that the bucket, the credentials or the server
    failed, which Composer's stores may report as a ``FileNotFoundError`` too).

    Example:
        >>> is_missing_object(FileNotFoundError('ep1.pt')), is_missing_object(ConnectionError('refused'))
        (True, False)
    """
    return isinstance(error, FileNotFoundError) and str(describe('?', error)) == str(describe('?', FileNotFoundError()))


def _error_code(error: BaseException) -> str | None:
    response = getattr(error, 'response', None)
    if isinstance(response, dict):
        code = (response.get('Error') or {}).get('Code')
        return str(code) if code is not None else None
    return None


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def download_file(store: Any, key: str, destination: str, shown_as: str) -> str:
    """Download object ``key`` of ``store`` to ``destination``, pointers followed; return the name of the object read.

    A Composer ``.symlink`` pointer is followed as Composer's ``get_file`` follows it
    (:func:`resolve_pointers`), a bounded number of times; the object it leads to is
    then downloaded as ``get_file`` downloads it. Errors name ``shown_as``, or the
    pointer at fault.
    """
    found = resolve_pointers(store, key, shown_as)
    shown = shown_as if found == key else _uri_of(store, found)
    try:
        store.download_object(object_name=found, filename=destination, overwrite=True)
    except Exception as error:
        raise describe(shown, error) from None
    return found


def resolve_pointers(store: Any, key: str, shown_as: str) -> str:
    """The object ``key`` of ``store`` leads to, Composer's ``.symlink`` pointers followed (at most
    :data:`~composer_sampling._stores.pointers.MAX_POINTERS` in a row); ``key`` itself when it is not there at all.

    A pointer that is empty, names itself, forms a loop, names a missing object, is
    longer than a pointer can be or is not text is a :class:`RemoteError` naming it.
    """
    from composer_sampling._stores.pointers import PointerError, follow_pointers

    def shown(name: str) -> str:
        return shown_as if name == key else _uri_of(store, name)

    try:
        return follow_pointers(key, lambda name: object_exists(store, name, shown(name)),
                               lambda name: _pointer_text(store, name, shown(name)), shown)
    except PointerError as error:
        raise RemoteError(str(error)) from None


def object_exists(store: Any, key: str, shown_as: str) -> bool:
    """Whether object ``key`` is in ``store``; a store that fails otherwise is a :class:`RemoteError`."""
    try:
        store.get_object_size(key)
    except Exception as error:
        if is_missing_object(error):
            return False
        raise describe(shown_as, error) from None
    return True


def _pointer_text(store: Any, key: str, shown_as: str) -> str:
    """The text of the pointer object ``key``, read only when it is small enough to be one."""
    from composer_sampling._stores.pointers import MAX_POINTER_BYTES

    try:
        size = store.get_object_size(key)
        if size > MAX_POINTER_BYTES:
            raise RemoteError(f'the pointer {shown_as} holds {size} bytes, more than the {MAX_POINTER_BYTES} a '
                              'pointer holds (the name of a checkpoint); it is not a pointer Composer wrote, so it '
                              'is not read')
        with tempfile.TemporaryDirectory(prefix='composer-sampling-pointer-') as folder:
            path = Path(folder) / 'pointer.symlink'
            store.download_object(object_name=key, filename=str(path), overwrite=True)
            data = path.read_bytes()
    except RemoteError:
        raise
    except Exception as error:
        raise describe(shown_as, error) from None
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError:
        raise RemoteError(f'the pointer {shown_as} does not hold text (it is not UTF-8), where Composer writes the '
                          'name of a checkpoint; it is not a pointer Composer wrote') from None


def _uri_of(store: Any, key: str) -> str:
    """The URI of object ``key`` of ``store`` (Composer's ``get_uri``), or the key where the store cannot say."""
    try:
        return str(store.get_uri(key))
    except Exception:
        return key


def download_folder(uri: str, destination: Path, wanted: Any = None) -> list[str]:
    """Download every object under ``uri`` (a folder) whose name ``wanted(relative_name)`` accepts into
    ``destination``, keeping the relative paths; return the relative names of all the objects listed.

    An empty listing is a :class:`RemoteError` (nothing is there, or the prefix is wrong).
    """
    store = reader_of(uri)
    _, _, key = split_uri(uri)
    prefix = key.rstrip('/') + '/' if key.strip('/') else ''
    try:
        names = [name[len(prefix):] for name in store.list_objects(prefix) if name.startswith(prefix)]
    except NotImplementedError:
        raise RemoteError(f'{uri}: Composer\'s {type(store).__name__} cannot list objects; copy the folder out of '
                          'the store and give the local copy') from None
    except Exception as error:
        raise describe(uri, error) from None
    if not names:
        raise RemoteError(f'{uri}: no object under this prefix (the bucket exists); check the path, which should be '
                          'the save folder of a run')
    for name in names:
        if wanted is None or wanted(name):
            target = destination / name
            if '..' in Path(name).parts or name.startswith('/'):
                raise RemoteError(f'{uri}: the object name {name!r} leads outside the folder; it is not read')
            target.parent.mkdir(parents=True, exist_ok=True)
            download_file(store, prefix + name, str(target), f'{uri.rstrip("/")}/{name}')
    return names
