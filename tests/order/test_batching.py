"""Batch math: exact divisions or an error naming the recipe field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from composer_sampling.batching import BatchSizeError, BatchSizes, batch_sizes


def test_the_grad_accum_recipe_on_two_ranks() -> None:
    assert batch_sizes(256, 2, accumulation_steps=4) == BatchSizes(2, 256, 128, 32, 4)
    assert batch_sizes(256, 2, microbatch=32) == BatchSizes(2, 256, 128, 32, 4)
    assert batch_sizes(256, 2, microbatch=32, accumulation_steps=4) == BatchSizes(2, 256, 128, 32, 4)
    assert batch_sizes(256, 2) == BatchSizes(2, 256, 128, 128, 1)


@given(world=st.integers(1, 64), micro=st.integers(1, 64), steps=st.integers(1, 16))
def test_divisible_settings_multiply_back(world: int, micro: int, steps: int) -> None:
    plan = batch_sizes(world * micro * steps, world, accumulation_steps=steps)
    assert plan.microbatch * plan.accumulation_steps * plan.world_size == plan.global_batch
    assert plan.device_batch * world == plan.global_batch and plan.microbatch == micro


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        ((250, 4), 'global_batch=250 is not divisible by the world size 4; use a multiple of 4, '
                   'such as 248 or 252'),
        ((3, 4), 'such as 4'),
        ((256, 2, 48), 'microbatch=48 does not divide the device batch 128'),
        ((256, 2, None, 3), 'accumulation_steps=3 does not divide the device batch 128'),
        ((256, 2, 32, 2), 'accumulation_steps=2 disagrees with microbatch=32: the '
                          'device batch 128 / 32 gives 4 steps'),
        ((0, 1), 'global_batch must be at least 1, got 0'),
        ((8, 1, -2), 'microbatch must be at least 1, got -2'),
        ((8, 1, None, 0), 'accumulation_steps must be at least 1, got 0'),
    ],
)
def test_errors_name_the_argument(args: tuple, message: str) -> None:
    with pytest.raises(BatchSizeError, match=message.replace('(', r'\(').replace(')', r'\)')):
        batch_sizes(*args)


def test_replication_divides_the_global_batch_over_data_parallel_ranks() -> None:
    plan = batch_sizes(256, 4, accumulation_steps=4, replication=2)
    assert (plan.device_batch, plan.microbatch, plan.data_parallel) == (128, 32, 2)
    with pytest.raises(BatchSizeError, match=r'not divisible by the 4 data-parallel ranks \(world size 8 / '
                                             r'replication 2\); use a multiple of 4, such as 96 or 100'):
        batch_sizes(98, 8, replication=2)
    with pytest.raises(BatchSizeError, match='replication=3 does not divide the world size 4; valid: 1, 2, 4'):
        batch_sizes(64, 4, replication=3)


def test_a_recipe_names_its_fields_in_the_same_errors() -> None:
    with pytest.raises(BatchSizeError) as caught:
        batch_sizes(256, 2, 48)
    fields = {'global_batch': 'global_train_batch_size', 'microbatch': 'device_train_microbatch_size'}
    assert caught.value.render(fields) == ('device_train_microbatch_size=48 does not divide the device batch 128 '
                                           '(global_train_batch_size=256 / world size 2); use a divisor of 128')
