"""The fingerprint of a mosaicml-streaming ``StreamingDataset``: its index files, its stream settings, and a bounded
read of each local shard file; a stream with a remote reads none.

Every test here builds ``StreamingDataset`` objects, which take a shared-memory prefix: tests/conftest.py runs them on
one pytest worker (``SHARED_RESOURCES``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from composer_sampling import _fingerprint
from composer_sampling._fingerprint import dataset_fingerprint


def _digest(dataset: object) -> str:
    return dataset_fingerprint(dataset).digest


def _streaming(root: Path, texts: list[str], local: Path | None = None, **stream: object) -> object:
    from streaming import MDSWriter, Stream, StreamingDataset

    if not (root / 'index.json').exists():
        with MDSWriter(out=str(root), columns={'text': 'str'}, size_limit=1 << 10, hashes=['sha1']) as writer:
            for text in texts:
                writer.write({'text': text})
    streams = [Stream(local=str(local or root), **stream)]  # type: ignore[arg-type]
    if local is not None and not local.exists():
        import shutil

        shutil.copytree(root, local)
    return StreamingDataset(streams=streams, batch_size=1, shuffle=False)


def test_a_streaming_dataset_covers_its_index_files_and_stream_settings(tmp_path: Path) -> None:
    texts = [f'sample {k:04d} ' * 8 for k in range(60)]
    first = _streaming(tmp_path / 'first', texts)
    copied = _streaming(tmp_path / 'first', texts, local=tmp_path / 'copy')
    assert _digest(first) == _digest(copied), 'the same shards in another folder'
    changed = _streaming(tmp_path / 'changed', [*texts[:-1], 'another sample' * 8])
    assert len(changed) == len(first) and _digest(changed) != _digest(first)  # type: ignore[arg-type]
    repeated = _streaming(tmp_path / 'first', texts, local=tmp_path / 'copy2', repeat=2)
    assert _digest(repeated) != _digest(first), 'the stream settings count'
    assert 'StreamingDataset of 1 stream' in dataset_fingerprint(first).source


def _mds(root: Path, texts: list[str], hashes: tuple[str, ...]) -> Path:
    from streaming import MDSWriter

    with MDSWriter(out=str(root), columns={'text': 'str'}, size_limit=1 << 10, hashes=list(hashes)) as writer:
        for text in texts:
            writer.write({'text': text})
    return root


def _stream_of(local: Path, remote: Path | None = None) -> object:
    from streaming import Stream, StreamingDataset

    return StreamingDataset(streams=[Stream(local=str(local), remote=None if remote is None else str(remote))],
                            batch_size=1, shuffle=False)


@pytest.mark.parametrize('hashes', [('sha1',), ()], ids=['with hashes', 'without hashes'])
def test_a_local_shard_replaced_at_the_same_size_with_its_index_left_is_seen(tmp_path: Path,
                                                                             hashes: tuple[str, ...]) -> None:
    """The issue's case: a shard file's bytes replaced by other samples of the same sizes, index.json left as it
    was. The first and last SHARD_EDGE_BYTES of each local shard file are read, so the fingerprint changes."""
    texts = [f'sample {k:04d} ' * 8 for k in range(60)]
    first = _mds(tmp_path / 'first', texts, hashes)
    other = _mds(tmp_path / 'other', [text.replace('sample', 'sampXe') for text in texts], hashes)
    before = dataset_fingerprint(_stream_of(first))
    assert before.samples == 60
    shard = first / 'shard.00001.mds'
    assert shard.stat().st_size == (other / 'shard.00001.mds').stat().st_size
    shard.write_bytes((other / 'shard.00001.mds').read_bytes())
    after = dataset_fingerprint(_stream_of(first))
    assert after.digest != before.digest
    assert ', and the size and the first and last 4 KiB of each local shard file' in after.source
    if hashes:
        assert after.covers_content
    else:
        assert not after.covers_content
        assert after.source.endswith("; its content is not covered: 8 of 8 shards have no hashes in their index "
                                     "(MDSWriter(hashes=['sha1']) records them), so a sample rewritten at the same "
                                     'size inside such a shard is not seen')


def test_the_read_of_a_shard_is_bounded_to_its_edges_and_to_a_number_of_files(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What the bounded read does not see, as the docs say: a byte changed between the edges of a shard."""
    monkeypatch.setattr(_fingerprint, 'SHARD_EDGE_BYTES', 64)
    folder = _mds(tmp_path / 'data', [f'sample {k:04d} ' * 8 for k in range(60)], ())
    shard = folder / 'shard.00002.mds'
    original = shard.read_bytes()
    before = _digest(_stream_of(folder))

    def changed_at(position: int) -> str:
        data = bytearray(original)
        data[position] ^= 1
        shard.write_bytes(bytes(data))
        return _digest(_stream_of(folder))

    assert changed_at(len(original) // 2) == before, 'between the edges: not read'
    assert changed_at(len(original) - 1) != before and changed_at(10) != before, 'the last and the first 64 bytes'
    shard.write_bytes(original)
    monkeypatch.setattr(_fingerprint, 'READ_SHARDS', 3)
    assert '(3 of 8 at a fixed stride)' in dataset_fingerprint(_stream_of(folder)).source


def test_a_stream_with_a_remote_reads_no_shard_and_keeps_its_fingerprint_as_its_cache_fills(tmp_path: Path) -> None:
    """Streaming downloads shards lazily: the fingerprint downloads and reads none of them, so it does not depend on
    which shards a node's cache holds."""
    remote = _mds(tmp_path / 'remote', [f'sample {k:04d} ' * 8 for k in range(60)], ('sha1',))
    cache = tmp_path / 'cache'
    dataset = _stream_of(cache, remote=remote)
    before = dataset_fingerprint(dataset)
    assert not list(cache.glob('shard.*')), 'the fingerprint downloaded a shard'
    assert dataset[0]['text'] == 'sample 0000 ' * 8  # type: ignore[index]
    assert list(cache.glob('shard.*'))
    assert dataset_fingerprint(_stream_of(cache, remote=remote)) == before
    assert before.covers_content
    assert before.source.endswith('; the shard files of 1 stream with a remote are not read, since they are '
                                  'downloaded lazily')
