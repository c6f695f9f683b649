"""The fingerprint of a train dataset: each kind changed in place at the same length gets another fingerprint, the
same data rebuilt elsewhere the same one, and a dataset's own fingerprint wins over its content."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import ConcatDataset, Dataset, Subset, TensorDataset

from composer_sampling import _fingerprint
from composer_sampling._fingerprint import Fingerprint, dataset_fingerprint

WHOLE = _fingerprint.WHOLE_ENTRIES


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


def test_a_subset_of_two_to_the_62_indices_is_fingerprinted_in_integers_quickly() -> None:
    """The issue's regression: the fixed-stride positions went through float64, which rounded the last one past the
    end of a range of 2**62 indices (IndexError)."""
    started = time.perf_counter()
    first = dataset_fingerprint(Subset(Plain(), range(2**62)))
    assert time.perf_counter() - started < 5  # about 0.1 s here
    assert first.samples == 2**62 and first.source.startswith('Subset of 4,611,686,018,427,387,904 indices of Plain')
    assert first.digest != _digest(Subset(Plain(), range(1, 2**62 + 1))), 'the last index is hashed'
    assert first.digest != _digest(Subset(Plain(), range(2**62 - 1)))


@pytest.mark.parametrize('count', [WHOLE + 1, 3 * WHOLE + 7, 10**8 + 3, 12_345_678_901])
def test_the_positions_in_integers_are_the_ones_float_arithmetic_picked_where_it_was_exact(count: int) -> None:
    """So that a checkpoint written before keeps its fingerprint: below about 3e10 entries the float64 positions
    were exact."""
    assert _fingerprint._positions(count) == np.linspace(0, count - 1, WHOLE).round().astype(np.int64).tolist()
    slices = _fingerprint._spread(count - _fingerprint.SLICE_BYTES, _fingerprint.SAMPLED_SLICES + 2).tolist()
    assert slices == np.linspace(0, count - _fingerprint.SLICE_BYTES,
                                 _fingerprint.SAMPLED_SLICES + 2).round().astype(np.int64).tolist()


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
    """A user's wrapper (an augmentation, a reader that logs) that keeps the dataset it reads, and says that its
    sample ``i`` is sample ``i`` of that dataset."""

    passes_indices_through = True

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> object:
        return self.dataset[index]


def test_a_wrapper_that_passes_indices_through_is_seen_through() -> None:
    from composer_sampling import PerSampleRNG

    base = TensorDataset(torch.arange(12))
    assert _digest(Wrapper(base)) == _digest(base) == _digest(Wrapper(Wrapper(base)))
    assert _digest(PerSampleRNG(base)) == _digest(base) == _digest(PerSampleRNG(Wrapper(base)))
    assert _digest(Wrapper(TensorDataset(torch.arange(1, 13)))) != _digest(base)
    assert dataset_fingerprint(Wrapper(base)).source.endswith(', read through Wrapper')
    assert dataset_fingerprint(PerSampleRNG(base)).covers_content
    assert not dataset_fingerprint(Wrapper(Plain())).covers_content


class Permuted(Dataset):
    """A wrapper that reorders its dataset: its sample ``i`` is ``dataset[order[i]]``."""

    def __init__(self, dataset: Dataset, order: object) -> None:
        self.dataset = dataset
        self.order = order

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> object:
        return self.dataset[int(self.order[index])]  # type: ignore[index]


class Drawn(Dataset):
    """A wrapper that reorders its dataset by an order it draws from a seed when a sample is read."""

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> object:
        order = np.random.default_rng(self.seed).permutation(len(self))
        return self.dataset[int(order[index])]


@pytest.mark.parametrize('kind', [list, np.asarray, torch.tensor])
def test_a_wrapper_that_may_reorder_has_its_class_and_index_arrays_in_the_fingerprint(kind: object) -> None:
    """The issue's case: the same dataset read in another permutation, through a wrapper of the same length."""
    base = TensorDataset(torch.arange(12))
    order, other = list(range(12))[::-1], [*range(1, 12), 0]
    first = Permuted(base, kind(order))  # type: ignore[operator]
    assert _digest(first) == _digest(Permuted(TensorDataset(torch.arange(12)), kind(order)))  # type: ignore[operator]
    assert _digest(first) != _digest(Permuted(base, kind(other))), 'another permutation'  # type: ignore[operator]
    assert _digest(first) != _digest(base), 'adding or removing a wrapper that may reorder is a change'
    fingerprint = dataset_fingerprint(first)
    assert fingerprint.covers_content
    assert fingerprint.source.endswith(', read through Permuted, whose class name and index arrays (order) join the '
                                       'fingerprint')


def test_a_wrapper_whose_order_the_fingerprint_cannot_see_says_that_it_does_not_cover_the_content() -> None:
    base = TensorDataset(torch.arange(12))
    fingerprint = dataset_fingerprint(Drawn(base, seed=3))
    assert not fingerprint.covers_content
    assert ('its content is not covered: Drawn is not declared passes_indices_through = True, and its attributes '
            'seed are not index arrays, so an order they make is not seen') in fingerprint.source
    assert fingerprint.digest != _digest(base)


class Typo(Dataset):
    """A dataset whose fingerprint property has a typo inside: reading it raises AttributeError."""

    def __init__(self) -> None:
        self.version = 'v1'

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> int:
        return index

    @property
    def fingerprint(self) -> str:
        return f'corpus {self.versoin}'  # type: ignore[attr-defined]


class Boom(Typo):
    @property
    def fingerprint(self) -> str:
        raise RuntimeError('boom')


class BoomMethod(Typo):
    def fingerprint(self) -> str:  # type: ignore[override]
        raise RuntimeError('boom')


@pytest.mark.parametrize(('dataset', 'raised'), [
    (Typo(), "AttributeError: 'Typo' object has no attribute 'versoin'"),
    (Boom(), 'RuntimeError: boom'),
    (BoomMethod(), 'RuntimeError: boom'),
], ids=['typo inside a property', 'another exception', 'a method'])
def test_an_own_fingerprint_that_raises_is_named_never_swallowed(dataset: Dataset, raised: str) -> None:
    name = type(dataset).__name__
    with pytest.raises(TypeError, match=rf'{name}\.fingerprint(\(\))? .*raised {raised}') as refused:
        dataset_fingerprint(dataset)
    assert isinstance(refused.value.__cause__, (AttributeError, RuntimeError))


def _on_two_ranks(datasets: list[object]) -> list[object]:
    """``agreed_fingerprint`` on two ranks, one thread each, gathering through a barrier: each rank's fingerprint or
    the exception it raised (a rank left waiting in the gather ends with BrokenBarrierError after 5 s)."""
    import threading

    from composer_sampling._resume.data_identity import agreed_fingerprint
    from composer_sampling._resume.ranks import Ranks

    barrier, slots, outcomes = threading.Barrier(2, timeout=5), [None, None], [None, None]

    def rank_of(rank: int) -> None:
        def gather(value: object) -> list[object]:
            slots[rank] = value  # type: ignore[call-overload]
            barrier.wait()
            gathered = list(slots)
            barrier.wait()
            return gathered

        try:
            outcomes[rank] = agreed_fingerprint(datasets[rank], Ranks(2, rank, gather))  # type: ignore[call-overload]
        except Exception as error:
            outcomes[rank] = error  # type: ignore[call-overload]

    threads = [threading.Thread(target=rank_of, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_every_rank_gets_the_same_refusal_when_one_ranks_fingerprint_raises() -> None:
    base = TensorDataset(torch.arange(3))
    for failing, kind in ((Boom(), TypeError), (Typo(), TypeError)):
        outcomes = _on_two_ranks([base, failing])
        assert all(isinstance(outcome, kind) for outcome in outcomes), outcomes
        assert str(outcomes[0]) == str(outcomes[1])
        assert str(outcomes[0]).startswith(f'SamplerSync (rank 1): reading {type(failing).__name__}.fingerprint ')


class Broken(Dataset):
    """A dataset whose length raises something that is neither a TypeError nor a ValueError."""

    def __len__(self) -> int:
        raise RuntimeError('the index server is down')

    def __getitem__(self, index: int) -> int:
        return index


def test_any_other_exception_while_fingerprinting_is_a_value_error_naming_the_dataset_on_every_rank() -> None:
    outcomes = _on_two_ranks([Broken(), Broken()])
    assert all(isinstance(outcome, ValueError) for outcome in outcomes), outcomes
    assert str(outcomes[1]) == ('SamplerSync (rank 0): fingerprinting the train dataset Broken raised RuntimeError: '
                                'the index server is down')


class Chained(Dataset):
    """A wrapper whose ``dataset`` can be pointed anywhere, a loop included."""

    passes_indices_through = True

    def __init__(self, dataset: object) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> object:
        return index


class Endless(Chained):
    """A wrapper whose ``dataset`` is a new wrapper each time it is read."""

    @property  # type: ignore[misc]
    def dataset(self) -> object:
        return Endless(None)

    @dataset.setter
    def dataset(self, value: object) -> None:
        pass


def test_a_chain_of_datasets_that_loops_is_a_named_error() -> None:
    first = Chained(None)
    second = Chained(first)
    first.dataset = second
    with pytest.raises(ValueError, match=r'the train dataset is a chain of datasets that loops: Chained.dataset is '
                                         r'Chained, Chained.dataset is Chained, which was met before'):
        dataset_fingerprint(first)
    looped = Subset(Chained(None), [0, 1, 2, 3])
    looped.dataset.dataset = looped  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r'loops: Subset.dataset is Chained, Chained.dataset is Subset'):
        dataset_fingerprint(looped)
    with pytest.raises(ValueError, match=rf'a chain of more than {_fingerprint.MAX_DEPTH} datasets \(Endless.dataset '
                                         r'is Endless'):
        dataset_fingerprint(Endless(None))


def _folder(root: Path, sizes: dict[str, int]) -> object:
    from torchvision.datasets import DatasetFolder

    for name, size in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'x' * size)
    return DatasetFolder(str(root), loader=lambda path: path, extensions=('.txt',))


def test_a_folder_dataset_without_root_says_that_it_hashes_absolute_paths(tmp_path: Path) -> None:
    files = {'cat/a.txt': 3, 'dog/c.txt': 5}
    folder = _folder(tmp_path / 'one', files)
    del folder.root  # type: ignore[attr-defined]
    fingerprint = dataset_fingerprint(folder)
    assert 'DatasetFolder over 2 files: absolute paths (it has no root, so a copy elsewhere differs), sizes and ' \
           'labels' in fingerprint.source
    assert 'relative' not in fingerprint.source
    moved = _folder(tmp_path / 'moved', files)
    del moved.root  # type: ignore[attr-defined]
    assert _digest(moved) != fingerprint.digest, 'as the source says: the paths are absolute'


def test_a_folder_dataset_covers_relative_paths_sizes_and_labels(tmp_path: Path) -> None:
    files = {'cat/a.txt': 3, 'cat/b.txt': 4, 'dog/c.txt': 5}
    first = _folder(tmp_path / 'one', files)
    assert _digest(first) == _digest(_folder(tmp_path / 'moved', files)), 'the same files in another folder'
    assert _digest(first) != _digest(_folder(tmp_path / 'grown', {**files, 'dog/c.txt': 6}))
    assert _digest(first) != _digest(_folder(tmp_path / 'renamed', {'cat/a.txt': 3, 'cat/b2.txt': 4, 'dog/c.txt': 5}))
    assert 'DatasetFolder over 3 files: relative paths, sizes and labels' in dataset_fingerprint(first).source


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
