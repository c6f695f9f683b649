"""Runs that never stop, on the ranks of a launcher invocation, for resumes on another world size (test_resume_layouts).

    composer -n 2 tests/support/resume_two_ranks.py FOLDER

For each row of ``ROWS``, trains it whole on every rank, writing its checkpoints
into ``FOLDER/<row>``, and writes every rank's batches to ``FOLDER/<row>/batches.json``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, where the support package is

from composer.utils import dist

from support.resume_harness import Row, fit_whole

ROWS = [
    Row('torch_distributed', randomness='global', stops=('mid',)),
    Row('resumable', workers=2, stops=('last_batch',)),
    Row('torch_distributed', stops=('mid',), replication=2),
    Row('user_batch', stops=('mid',)),
]


def main(folder: Path) -> None:
    warnings.simplefilter('ignore')
    for row in ROWS:
        whole, stops = fit_whole(row, folder / str(row))
        every_rank = dist.all_gather_object(whole.batches)
        if dist.get_global_rank() == 0:
            (folder / str(row) / 'batches.json').write_text(json.dumps({'batches': every_rank, 'stops': stops}))


if __name__ == '__main__':
    main(Path(sys.argv[1]))
