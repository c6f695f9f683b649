"""Samplers that draw their order from a generator (torch's RandomSampler) follow the data seed, epoch by epoch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from composer_sampling import SamplerSync
from composer_sampling._graph.seeding import epoch_generator_seed
from composer_sampling.recipes.schema import load_recipe
from composer_sampling.train import train as train_recipe

from support.helpers import IndexLedger, synthetic
from support.helpers import train_with_ledger as train

pytestmark = pytest.mark.composer

SIZE, BATCH = 48, 8
ROOT = Path(__file__).resolve().parents[2]


def shuffled(generator: torch.Generator | None = None) -> DataLoader:
    dataset = synthetic(SIZE)
    return DataLoader(dataset, batch_size=BATCH, sampler=RandomSampler(dataset, generator=generator))


def test_the_order_is_a_function_of_the_data_seed_and_the_epoch() -> None:
    first = train(shuffled(), '3ep', sync=SamplerSync(data_seed=5))
    again = train(shuffled(), '3ep', sync=SamplerSync(data_seed=5))
    other = train(shuffled(), '3ep', sync=SamplerSync(data_seed=6))
    assert first.batches == again.batches
    assert first.trained[0] != other.trained[0]
    assert len({tuple(first.trained[epoch]) for epoch in range(3)}) == 3, 'a new order every epoch'
    for epoch in range(3):
        generator = torch.Generator().manual_seed(epoch_generator_seed(5, epoch))
        assert first.trained[epoch] == torch.randperm(SIZE, generator=generator).tolist()


def test_a_generator_you_seeded_is_replaced_with_a_warning_that_says_how_to_keep_it() -> None:
    warning = (r'RandomSampler\(len=48\) had a generator seeded 42; it now draws every epoch from a generator seeded '
               r'from the data seed 17.*SamplerSync\(data_seed=42\)')
    with pytest.warns(UserWarning, match=warning):
        train(shuffled(torch.Generator().manual_seed(42)), '1ep')


def test_a_generator_seeded_with_the_data_seed_is_replaced_quietly(recwarn: pytest.WarningsRecorder) -> None:
    train(shuffled(torch.Generator().manual_seed(42)), '2ep', sync=SamplerSync(data_seed=42))
    train(shuffled(torch.Generator()), '1ep')  # never seeded by anybody
    assert not [w for w in recwarn if 'had a generator' in str(w.message)]


def _random_recipe(*overrides: str) -> IndexLedger:
    ledger = IndexLedger()
    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', ['train_loader.sampler={name: random}', 'max_duration=2ep',
                                                          'eval_interval=2ep', *overrides])
    train_recipe(recipe, callbacks=[ledger])
    return ledger


def test_the_random_recipe_follows_the_seed_and_resumes_exactly(tmp_path: Path) -> None:
    whole = _random_recipe('seed=1')
    assert whole.trained[0] != _random_recipe('seed=2').trained[0]
    _random_recipe('seed=1', 'max_duration=30ba', f'save_folder={tmp_path}', 'save_interval=30ba')
    resumed = _random_recipe('seed=1', f'load_path={tmp_path}/ep1-ba30-rank0.pt')
    assert resumed.batches == whole.batches[30:]
