"""What every sampler of ours shares: validated arguments, seed, epoch, start offset, checkpoints."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DistributedSampler

from composer_sampling.order import MAX_SEED
from composer_sampling.samplers.state import check_state, sampler_state
from composer_sampling.validate import check_bool, check_int, resolve_replicas

__all__ = ['OrderedSampler']


class OrderedSampler(DistributedSampler):
    """Base of our samplers: a ``DistributedSampler`` whose order is a pure function of seed and epoch.

    Subclasses set ``dataset_len`` (or what defines their order), implement
    ``__iter__``, ``num_samples`` and :meth:`order_signature`, and list in
    ``_repr_fields`` the constructor arguments ``__repr__`` shows. The global start
    offset :attr:`sample_in_epoch` survives ``set_epoch`` with the same epoch (the
    trainer repeats it after a resume) and is cleared by a new epoch.
    """

    _repr_fields: tuple[str, ...] = ()

    def __init__(
        self,
        num_replicas: int | None,
        rank: int | None,
        shuffle: bool,
        seed: int,
        drop_last: bool = False,
    ) -> None:
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank)
        self.shuffle = check_bool('shuffle', shuffle)
        self.drop_last = check_bool('drop_last', drop_last)
        self._seed = check_int('seed', seed, 0, MAX_SEED)
        self.epoch = 0
        self.sample_in_epoch = 0

    @property
    def seed(self) -> int:
        """The data seed; must be identical on every rank."""
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._seed = check_int('seed', value, 0, MAX_SEED)

    @property
    def total_size(self) -> int:  # type: ignore[override]
        """Indices across all ranks in the current epoch, padding included."""
        return self.num_samples * self.num_replicas

    def __len__(self) -> int:
        return self.num_samples

    def epoch_usage(self) -> tuple[int, int]:
        """Dataset length and samples trained across ranks in one pass over the data (padding included)."""
        return self.dataset_len, self.total_size

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's order; a new epoch starts at its beginning, the same epoch keeps its offset."""
        check_int('epoch', epoch)
        if epoch != self.epoch:
            self.sample_in_epoch = 0
        self.epoch = epoch

    def set_sample_in_epoch(self, sample_in_epoch: int) -> None:
        """Start the current epoch after ``sample_in_epoch`` samples trained across all ranks."""
        self.sample_in_epoch = check_int('sample_in_epoch', sample_in_epoch)

    def order_signature(self) -> dict[str, Any]:
        """What fixes the global order besides seed and epoch; a resume must not change it."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Epoch, global start offset and seed: all that a resume needs."""
        return sampler_state(self, epoch=self.epoch, sample_in_epoch=self.sample_in_epoch, seed=self._seed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; refuses a state saved by a sampler of another order."""
        values = check_state(self, state, ('epoch', 'sample_in_epoch', 'seed'))
        self.seed = values['seed']
        self.epoch = check_int('epoch', values['epoch'])
        self.set_sample_in_epoch(values['sample_in_epoch'])

    def __repr__(self) -> str:
        fields = ', '.join(f'{name}={self._repr_value(name)}' for name in self._repr_fields)
        return f'{type(self).__name__}({fields})'

    def _repr_value(self, name: str) -> str:
        value = getattr(self, name)
        if name == 'dataset' and not isinstance(value, int):
            return f'<{type(value).__name__} len={self.dataset_len}>'
        return repr(value)
