"""What a user waits for before anything trains: importing the package, the command's start-up, and ``plan``.

    .venv/bin/python scripts/bench_startup.py [--repeats 5]

Each command runs as a whole process, ``--repeats`` times after one warm-up, the
commands interleaved (A B C A B C ...) so that a drift in the machine's speed falls
on all of them alike. For each: the median wall time, CPU time (user + system) and
peak resident memory, read from the operating system's accounting of the finished
child (``os.wait4``), as ``/usr/bin/time -v`` reports them. ``import torch`` is the
reference: the samplers subclass torch's, so whatever builds one waits for it, while
``import composer_sampling`` and the command's start-up import torch only when a
command needs it. This process imports nothing heavy itself, since a child's peak
resident memory starts from its parent's at the fork.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_report import write_section

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CLI = str(Path(PYTHON).parent / 'composer-sampling')
PLAN_1024 = [CLI, 'plan', 'yamls/digits.yaml', '--world-size', '1024', 'train_loader.dataset.name=synthetic',
             'train_loader.dataset.size=1250000', 'global_train_batch_size=4096']
COMMANDS = {
    'python -c "import torch"': [PYTHON, '-c', 'import torch'],
    'python -c "import composer_sampling"': [PYTHON, '-c', 'import composer_sampling'],
    'python -c "from composer_sampling import SamplerSync"': [PYTHON, '-c',
                                                               'from composer_sampling import SamplerSync'],
    'composer-sampling --help': [CLI, '--help'],
    'composer-sampling plan (bad recipe: exit 2)': [CLI, 'plan', 'yamls/digits.yaml', 'seed=-1'],
    'composer-sampling plan, 1024 ranks, 1e6 samples, 2 epochs': PLAN_1024,
}


def run_once(command: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one run of ``command``."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = 0  # reaped by wait4
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    for command in COMMANDS.values():  # warm-up: file caches
        run_once(command)
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            results[name].append(run_once(command))
    floor = statistics.median(wall for wall, _, _ in results['python -c "import torch"'])
    rows = ['| command | wall | CPU | peak RSS | wall against `import torch` |', '| --- | ---: | ---: | ---: | ---: |']
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        rss = statistics.median(r[2] for r in runs)
        rows.append(f'| `{name}` | {wall:.2f} s | {cpu:.2f} s | {rss:.0f} MiB | {wall - floor:+.2f} s |')
    body = '\n'.join(rows) + (
        f'\n\nMedians over {args.repeats} runs of each, interleaved, after one warm-up. The plan row runs\n'
        f'`{" ".join(Path(part).name if part == CLI else part for part in PLAN_1024)}`. `plan` runs the checks\n'
        '`train` runs, which import every part\'s builder (SamplerSync among them): its start-up holds Composer\'s\n'
        'import, as `from composer_sampling import SamplerSync` does. A recipe its schema refuses exits before that.'
    )
    write_section('bench_startup.py', f'.venv/bin/python scripts/bench_startup.py --repeats {args.repeats}', body)


if __name__ == '__main__':
    main()
