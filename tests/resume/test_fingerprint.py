"""The fingerprint of a train dataset: each kind changed in place at the same length gets another fingerprint, the
same data rebuilt elsewhere the same one, and a dataset's own fingerprint wins over its content."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import ConcatDataset, Dataset, Subset, TensorDataset

from composer_sampling import _fingerprint
from composer_sampling._fingerprint import Fingerprint, dataset_fingerprint


def _digest(dataset: object) -> str:
    return dataset_fingerprint(dataset).digest


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=40), st.data())
def test_a_tensor_dataset_changes_its_fingerprint_exactly_when_its_content_changes(values: list[int],
                                                                                  data: st.DataObject) -> None:
    tensor = torch.tensor(values, dtype=torch.int64)
    assert _digest(TensorDataset(tensor)) == _digest(TensorDataset(tensor.clone()))
    position = data.draw(st.integers(0, len(values) - 1))
    changed = tensor.clone()
    changed[position] += 1
    assert _digest(TensorDataset(changed)) != _digest(TensorDataset(tensor))
    assert _digest(TensorDataset(tensor.to(torch.int32))) != _digest(TensorDataset(tensor)), 'the dtype counts'
    assert _digest(TensorDataset(tensor.view(1, -1))) != _digest(TensorDataset(tensor)), 'the shape counts'


def test_a_large_tensor_is_hashed_in_slices_at_a_fixed_stride(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above WHOLE_BYTES a tensor is sampled: a change in its first or last slice is seen; the cost stays bounded."""
    monkeypatch.setattr(_fingerprint, 'WHOLE_BYTES', 4096)
    monkeypatch.setattr(_fingerprint, 'SLICE_BYTES', 64)
    monkeypatch.setattr(_fingerprint, 'SAMPLED_SLICES', 8)
    tensor = torch.arange(100_000, dtype=torch.int64)
    for position in (0, 99_999):
        changed = tensor.clone()
        changed[position] = -1
        assert _digest(TensorDataset(changed)) != _digest(TensorDataset(tensor))
    assert _digest(TensorDataset(tensor[::2])) == _digest(TensorDataset(tensor[::2].contiguous()))


def test_subset_and_concat_follow_their_parts_and_order() -> None:
    base = TensorDataset(torch.arange(20))
    other = TensorDataset(torch.arange(20) * 2)
    assert _digest(Subset(base, [1, 2, 3])) == _digest(Subset(TensorDataset(torch.arange(20)), [1, 2, 3]))
    assert _digest(Subset(base, [1, 2, 3])) != _digest(Subset(base, [1, 2, 4]))
    assert _digest(Subset(base, [1, 2, 3])) != _digest(Subset(other, [1, 2, 3]))
    assert _digest(Subset(base, torch.tensor([1, 2, 3]))) == _digest(Subset(base, [1, 2, 3]))
    assert _digest(ConcatDataset([base, other])) != _digest(ConcatDataset([other, base])), 'the order of the parts'
    assert 'ConcatDataset of 2 parts in order' in dataset_fingerprint(ConcatDataset([base, other])).source


def test_long_subset_indices_are_sampled_at_a_fixed_stride(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fingerprint, 'WHOLE_ENTRIES', 16)
    base = TensorDataset(torch.arange(1000))
    indices = list(range(1000))
    assert _digest(Subset(base, indices)) != _digest(Subset(base, [*indices[:-1], 0])), 'the last entry is sampled'
    assert _digest(Subset(base, indices)) != _digest(Subset(base, indices[:-1])), 'the length counts'


class Owned(Dataset):
    """A user's dataset that names its own content."""

    def __init__(self, values: torch.Tensor, fingerprint: object) -> None:
        self.values = values
        self.fingerprint = fingerprint

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.values[index]


class Method(Dataset):
    """A user's dataset whose fingerprint is a method."""

    def __init__(self, values: torch.Tensor, version: str) -> None:
        self.values = values
        self.version = version

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.values[index]

    def fingerprint(self) -> str:
        return f'tokenized with {self.version}'


def test_a_datasets_own_fingerprint_wins_over_its_content() -> None:
    first, second = Owned(torch.arange(5), 'v1'), Owned(torch.arange(5) + 9, 'v1')
    assert _digest(first) == _digest(second)
    assert _digest(first) != _digest(Owned(torch.arange(5), 'v2'))
    assert _digest(Method(torch.arange(5), 'a')) != _digest(Method(torch.arange(5), 'b'))
    assert "own fingerprint 'tokenized with a'" in dataset_fingerprint(Method(torch.arange(5), 'a')).source
    with pytest.raises(TypeError, match=r'Owned.fingerprint must be a str or a method returning one, got int: 3'):
        dataset_fingerprint(Owned(torch.arange(5), 3))


class Plain(Dataset):
    def __len__(self) -> int:
        return 7

    def __getitem__(self, index: int) -> int:
        raise AssertionError('a fingerprint reads no sample')


def test_anything_else_is_its_class_and_length_and_says_so() -> None:
    fingerprint = dataset_fingerprint(Plain())
    assert not fingerprint.covers_content
    assert 'Plain of 7 samples: class and length only; its content is not covered' in fingerprint.source
    assert 'a fingerprint attribute on the dataset' in str(fingerprint)
    assert fingerprint == dataset_fingerprint(Plain())
    assert not dataset_fingerprint(ConcatDataset([Plain(), TensorDataset(torch.arange(3))])).covers_content


class Wrapper(Dataset):
    """A user's wrapper (an augmentation, a reader that logs) that keeps the dataset it reads."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> object:
        return self.dataset[index]


def test_a_wrapper_is_seen_through() -> None:
    from composer_sampling import PerSampleRNG

    base = TensorDataset(torch.arange(12))
    assert _digest(Wrapper(base)) == _digest(base) == _digest(Wrapper(Wrapper(base)))
    assert _digest(PerSampleRNG(base)) == _digest(base)
    assert _digest(Wrapper(TensorDataset(torch.arange(1, 13)))) != _digest(base)
    assert dataset_fingerprint(Wrapper(base)).source.endswith(', read through Wrapper')
    assert not dataset_fingerprint(Wrapper(Plain())).covers_content


def _folder(root: Path, sizes: dict[str, int]) -> object:
    from torchvision.datasets import DatasetFolder

    for name, size in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'x' * size)
    return DatasetFolder(str(root), loader=lambda path: path, extensions=('.txt',))


def test_a_folder_dataset_covers_relative_paths_sizes_and_labels(tmp_path: Path) -> None:
    files = {'cat/a.txt': 3, 'cat/b.txt': 4, 'dog/c.txt': 5}
    first = _folder(tmp_path / 'one', files)
    assert _digest(first) == _digest(_folder(tmp_path / 'moved', files)), 'the same files in another folder'
    assert _digest(first) != _digest(_folder(tmp_path / 'grown', {**files, 'dog/c.txt': 6}))
    assert _digest(first) != _digest(_folder(tmp_path / 'renamed', {'cat/a.txt': 3, 'cat/b2.txt': 4, 'dog/c.txt': 5}))
    assert 'DatasetFolder over 3 files: relative paths, sizes and labels' in dataset_fingerprint(first).source


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


def test_a_hugging_face_dataset_brings_its_own_fingerprint() -> None:
    datasets = pytest.importorskip('datasets')
    first = datasets.Dataset.from_dict({'text': ['a', 'b', 'c']})
    assert _digest(first) == _digest(datasets.Dataset.from_dict({'text': ['a', 'b', 'c']}))
    assert _digest(first) != _digest(datasets.Dataset.from_dict({'text': ['a', 'b', 'd']}))
    assert 'Hugging Face Dataset fingerprint' in dataset_fingerprint(first).source


def test_the_short_form_and_the_digest() -> None:
    fingerprint = dataset_fingerprint(TensorDataset(torch.zeros(3)))
    assert isinstance(fingerprint, Fingerprint) and len(fingerprint.digest) == 32
    assert fingerprint.short == fingerprint.digest[:16] and str(fingerprint).startswith(fingerprint.short)
    assert np.frombuffer(bytes.fromhex(fingerprint.digest), dtype=np.uint8).size == 16
