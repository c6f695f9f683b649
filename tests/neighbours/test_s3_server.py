"""The S3 server of the tests is real: Composer's own object store writes, lists and reads through it."""

from __future__ import annotations

from pathlib import Path

import pytest
from composer.utils import maybe_create_object_store_from_uri

pytestmark = pytest.mark.s3


def test_composer_object_store_round_trips_through_the_server(s3_bucket: str, tmp_path: Path) -> None:
    store = maybe_create_object_store_from_uri(f'{s3_bucket}/run')
    assert store is not None
    source = tmp_path / 'a.bin'
    source.write_bytes(b'\x00\x01ledger')
    store.upload_object('run/ledger/a.bin', source)
    assert [name for name in store.list_objects('run/')] == ['run/ledger/a.bin']
    store.download_object('run/ledger/a.bin', tmp_path / 'b.bin')
    assert (tmp_path / 'b.bin').read_bytes() == source.read_bytes()


def test_the_server_refuses_other_keys(s3_bucket: str, s3_server) -> None:
    import botocore.exceptions
    with pytest.raises(botocore.exceptions.ClientError, match='SignatureDoesNotMatch'):
        s3_server.client(aws_secret_access_key='wrong').list_objects_v2(Bucket=s3_bucket.removeprefix('s3://'))
