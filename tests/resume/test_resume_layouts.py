"""A resume on another batch size, world size or replication: the same samples, or a refusal whose advice works.

A graph whose order does not depend on the world size (ours; torch's
``DistributedSampler``) continues at the next sample of the epoch on any layout
whose data-parallel ranks divide the samples already trained. A batch sampler of
yours continues only on the same distinct global batch and data-parallel world
size, and is refused otherwise, by name, with advice that is tested to work.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.launcher import launch
from support.resume_harness import BATCH, Row, fit, fit_whole, resume_elsewhere

SAME_RANKS = [Row('resumable', stops=('mid',)), Row('torch_distributed', workers=2, stops=('last_batch',)),
              Row('torch_random', stops=('mid',))]


@pytest.mark.parametrize('row', SAME_RANKS, ids=str)
def test_another_batch_size_trains_the_same_samples(row: Row, tmp_path: Path) -> None:
    whole, stops = fit_whole(row, tmp_path)
    (stop,) = stops.values()
    assert resume_elsewhere(row, tmp_path, [whole.batches], stop, batch=2 * BATCH) == []


def test_a_batch_sampler_of_yours_on_another_batch_size_is_refused_with_advice_that_works(tmp_path: Path) -> None:
    row = Row('user_batch', stops=('mid',))
    whole, stops = fit_whole(row, tmp_path)
    (stop,) = stops.values()
    with pytest.raises(ValueError, match=r'BatchShuffleSampler\(seed=17, len=5\) decides the order of whole batches.* '
                                         r'Resume with global batch 4 \(device batch 4 on each of the 1 '):
        resume_elsewhere(row, tmp_path, [whole.batches], stop, batch=2 * BATCH)
    assert resume_elsewhere(row, tmp_path, [whole.batches], stop, batch=BATCH) == []  # the advice


@pytest.mark.launcher
@pytest.mark.composer
def test_two_rank_checkpoints_resume_on_one_rank(tmp_path: Path) -> None:
    result, output = launch(['-n', '2', 'tests/support/resume_two_ranks.py', str(tmp_path)], tmp_path / 'logs')
    assert result.returncode == 0, output
    from support.resume_two_ranks import ROWS

    for number, row in enumerate(ROWS):
        folder = tmp_path / str(row)
        saved = json.loads((folder / 'batches.json').read_text())
        per_rank = [[(epoch, indices) for epoch, indices in batches] for batches in saved['batches']]
        (stop,) = saved['stops'].values()
        alone = Row(row.sampler, row.workers, row.randomness, row.stops)  # one rank, no replication
        distinct = 2 * BATCH // row.replication  # the same distinct samples a step
        if row.sampler == 'user_batch':
            refusal = (r'trained on 2 data-parallel ranks, this run has 1, and the order of BatchShuffleSampler.* may '
                       r'depend on the world size.* Resume on 2')
            with pytest.raises(ValueError, match=refusal):
                fit(alone, folder, load=next(folder.glob(f'ep*-ba{stop}-rank0.pt')), batch=distinct)
            continue
        group = per_rank if row.replication == 1 else per_rank[:1]
        if number:
            assert resume_elsewhere(alone, folder, group, stop, batch=distinct) == []
            continue
        with pytest.warns(UserWarning, match='the checkpoint holds the RNG states of 2 ranks and this run has 1, '
                                             'so the RNG state cannot be restored'):
            assert resume_elsewhere(alone, folder, group, stop, batch=distinct) == []
