"""Reading an ``s3://`` folder with boto3 directly, so that ``audit`` does not import Composer for it.

Importing Composer takes seconds, far longer than downloading a ledger of a few
kilobytes. :class:`S3Reader` offers the read methods of Composer's ``S3ObjectStore``
that :mod:`composer_sampling._stores.remote` calls (``list_objects``, ``get_object_size``,
``download_object``, ``get_uri``), builds its client as Composer does (boto3's default
credentials, ``S3_ENDPOINT_URL`` when set, adaptive retries), and reports a missing
object as Composer does: a ``FileNotFoundError`` whose cause is boto3's error, so
:func:`composer_sampling._stores.remote.describe` reads both the same way.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

__all__ = ['S3Reader']

#: S3 error codes that Composer's ``S3ObjectStore`` reports as a missing object.
_NOT_FOUND_CODES = ('403', '404', 'NoSuchKey')


class S3Reader:
    """The objects of one S3 bucket, read with boto3.

    Args:
        bucket (str): The bucket name, without ``s3://``.

    Raises:
        ImportError: when boto3 is not installed.
    """

    def __init__(self, bucket: str) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.client: Any = boto3.Session().client('s3', config=Config(retries={'mode': 'adaptive'}),
                                                  endpoint_url=os.environ.get('S3_ENDPOINT_URL'))

    def __repr__(self) -> str:
        return f'S3Reader({self.bucket!r})'

    def get_uri(self, object_name: str) -> str:
        return f's3://{self.bucket}/{object_name}'

    def list_objects(self, prefix: str | None = None) -> list[str]:
        """The names of every object whose name starts with ``prefix``."""
        pages = self.client.get_paginator('list_objects_v2').paginate(Bucket=self.bucket, Prefix=prefix or '')
        return [entry['Key'] for page in pages for entry in page.get('Contents', [])]

    def get_object_size(self, object_name: str) -> int:
        """The size of the object in bytes; a ``FileNotFoundError`` when it is not there."""
        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=object_name)['ContentLength'])
        except Exception as error:
            self._raise(object_name, error)
            raise

    def download_object(self, object_name: str, filename: str, overwrite: bool = False) -> None:
        """Download the object to ``filename`` through a temporary file beside it, replaced whole at the end."""
        if os.path.exists(filename) and not overwrite:
            raise FileExistsError(f'{filename} exists and overwrite is False')
        partial = f'{filename}.{uuid.uuid4().hex}.tmp'
        try:
            self.client.download_file(Bucket=self.bucket, Key=object_name, Filename=partial)
        except Exception as error:
            if os.path.exists(partial):
                os.remove(partial)
            self._raise(object_name, error)
            raise
        os.replace(partial, filename)

    def _raise(self, object_name: str, error: Exception) -> None:
        """Raise a ``FileNotFoundError`` caused by ``error`` for the codes Composer reads as a missing object."""
        response = getattr(error, 'response', None)
        code = (response.get('Error') or {}).get('Code') if isinstance(response, dict) else None
        if code in _NOT_FOUND_CODES:
            raise FileNotFoundError(f'Object {self.get_uri(object_name)} not found') from error
