"""DataOrder serves a loop written by hand on one process: a new order every epoch that follows the seed, a resume
after a mid-epoch checkpoint that ends with the weights of the run that never stopped, and the refusals.

Two ranks (torchrun, gloo) are ``tests/loop/dist``'s, launched with the Lightning tests
(tests/lightning/test_launch.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from composer_sampling import DataOrder, DataOrderError

from support.loop_parts import KINDS, loader, run, same_weights


def _epochs(trained: list[tuple[int, list[int]]]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for epoch, indices in trained:
        found.setdefault(epoch, []).extend(indices)
    return found


def test_every_epoch_covers_every_sample_in_a_new_order_that_follows_the_seed() -> None:
    first = _epochs(run(loader('ours'), 24).trained)
    assert sorted(first) == [0, 1, 2] and all(sorted(order) == list(range(64)) for order in first.values())
    assert len({tuple(order) for order in first.values()}) == 3
    assert _epochs(run(loader('ours'), 24).trained) == first
    assert _epochs(run(loader('ours'), 24, data_seed=18).trained) != first


@pytest.mark.parametrize('kind', KINDS)
def test_a_mid_epoch_checkpoint_resumes_bit_for_bit(kind: str, tmp_path: Path) -> None:
    """8 batches an epoch; stopped right after step 11 (epoch 1, batch 3), resumed: the same batches, weights and
    momentum as the run that never stopped, dropout on; no sample trained before the checkpoint is loaded again."""
    whole = run(loader(kind), 20)
    checkpoint = tmp_path / 'step11.pt'
    run(loader(kind), 20, save_at=11, checkpoint=checkpoint)
    resumed_loader = loader(kind)
    resumed = run(resumed_loader, 20, resume=checkpoint)
    assert resumed.trained == whole.trained[11:]
    assert same_weights(whole, resumed)
    assert resumed_loader.dataset.reads == [index for _, indices in resumed.trained for index in indices]


def test_a_checkpoint_at_an_epochs_last_batch_resumes_at_the_next_epoch(tmp_path: Path) -> None:
    whole = run(loader('ours'), 20)
    run(loader('ours'), 20, save_at=8, checkpoint=tmp_path / 'step8.pt')
    resumed = run(loader('ours'), 20, resume=tmp_path / 'step8.pt')
    assert resumed.trained == whole.trained[8:] and resumed.trained[0][0] == 1
    assert same_weights(whole, resumed)


def test_other_data_is_refused_naming_the_fingerprint_and_continues_when_allowed(tmp_path: Path) -> None:
    run(loader('ours'), 20, save_at=5, checkpoint=tmp_path / 'step5.pt')
    with pytest.raises(DataOrderError, match=r"the train dataset is not the one the checkpoint trained on: its "
                                             r"fingerprint was [0-9a-f]{16}, from the Named's own fingerprint"):
        run(loader('ours', seed=1), 20, resume=tmp_path / 'step5.pt')
    with pytest.warns(UserWarning, match='Continuing, because allow_data_change is true'):
        resumed = run(loader('ours', seed=1), 12, resume=tmp_path / 'step5.pt', allow_data_change=True)
    assert len(resumed.trained) == 7


def test_a_loop_that_skips_the_checkpoints_epoch_or_has_no_seed_is_refused(tmp_path: Path) -> None:
    run(loader('ours'), 20, save_at=11, checkpoint=tmp_path / 'step11.pt')
    order = DataOrder(loader('ours'), data_seed=17)
    order.load_state_dict(torch.load(tmp_path / 'step11.pt', weights_only=True)['data_order'])
    assert order.epoch == 1
    with pytest.raises(DataOrderError, match=r'saved at epoch 1, batch 3 .*continues with set_epoch\(1\), not '
                                             r'set_epoch\(2\)'):
        order.set_epoch(2)
    with pytest.raises(DataOrderError, match=r'DataOrder has no data seed: pass DataOrder\(loader, data_seed=...\)'):
        DataOrder(loader('ours')).set_epoch(0)
    with pytest.raises(DataOrderError, match=r'call set_epoch\(epoch\) before iterating'):
        iter(DataOrder(loader('ours'), data_seed=3)).__next__()


class _Groups(torch.utils.data.Sampler):
    """A user's batch of batches with neither set_epoch nor a generator: two batches of a seeded sampler as one. With
    ``hidden``, it keeps them under a name the graph walk does not follow, so the generator below is never reseeded
    and its draws of one epoch depend on the epochs before."""

    def __init__(self, batches: torch.utils.data.BatchSampler, hidden: bool) -> None:
        if hidden:
            self.inner = batches
        else:
            self.batch_sampler = batches

    def _batches(self) -> torch.utils.data.BatchSampler:
        return getattr(self, 'inner', None) or self.batch_sampler

    def __iter__(self):  # type: ignore[no-untyped-def]
        drawn = list(self._batches())
        return iter([drawn[k] + drawn[k + 1] for k in range(0, len(drawn), 2)])

    def __len__(self) -> int:
        return len(self._batches()) // 2


@pytest.mark.parametrize('hidden', [False, True], ids=['reached', 'hidden'])
def test_a_batch_of_batches_that_orders_by_nothing_of_ours_resumes_in_a_later_epoch(hidden: bool,
                                                                                     tmp_path: Path) -> None:
    """Its trained index lists are drawn again at the resume and checked against the checkpoint's digest, which the
    loop keeps for every epoch of the placed loader, not only the first: the same lists continue the epoch exactly;
    where the generator below is out of reach, the lists of a later epoch come out different and the resume is
    refused."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    from support.loop_parts import Named

    def groups() -> DataLoader:
        data = Named()
        inner = BatchSampler(RandomSampler(data, generator=torch.Generator().manual_seed(5)), 4, drop_last=False)
        return DataLoader(data, batch_sampler=_Groups(inner, hidden))

    whole = run(groups(), 20)
    run(groups(), 20, save_at=11, checkpoint=tmp_path / 'step11.pt')
    if hidden:
        with pytest.raises(DataOrderError, match='the 3 index lists trained before the checkpoint come out different'):
            run(groups(), 20, resume=tmp_path / 'step11.pt')
        return
    resumed = run(groups(), 20, resume=tmp_path / 'step11.pt')
    assert resumed.trained == whole.trained[11:] and resumed.trained[0][0] == 1
    assert same_weights(whole, resumed)
