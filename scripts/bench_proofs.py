"""Both proofs and ``audit`` at scale: whole-process wall time and peak memory of ``plan`` and ``audit``.

    .venv/bin/python scripts/bench_proofs.py [--repeats 3] [--plan-1e8] [--plan-1e9] [--plan-base DIR]
                                             [--audit-samples 1e9]
    .venv/bin/python scripts/bench_proofs.py --construction-only [--repeats 3]   (prints the rows, writes nothing)
    .venv/bin/python scripts/bench_proofs.py --audit-only [--audit-samples 1e9] [--audit-against TREE]

``plan`` runs on a recipe whose sampler graph forces the counted proof: our
``ResumableDistributedSampler`` under a batch-shuffling custom batch sampler (the
demo's ``BatchShuffleSampler``, presented by ``DistributedBatchAdapter``), so every
rank's order is iterated and counted, by worker processes (one a core). Its peak
memory is also summed over the process tree (resident set sizes, sampled every
0.2 s), and ``--plan-base DIR`` runs each plan case with the package of another
checkout too (e.g. ``git worktree add /tmp/base main``), in turns, for a side by
side. The cost of each part of the count, per sample, is measured in this process
on a few ranks of the 1e9 case. ``audit`` reads ledger files this script writes
with ``LedgerWriter`` (64 ranks, one epoch of a shuffled order, 1,024 indices a
record) into a temporary folder and deletes afterwards; ``cat FILES > /dev/null`` of
the same bytes is its floor. Both run warm (the files just written, in the page
cache) and cold (each file's cached pages dropped with ``posix_fadvise(DONTNEED)``
just before); ``--audit-against TREE`` times the audit of another checkout (say,
main's, with ``git worktree add``) side by side. Every command is a whole process, timed by
``/usr/bin/time -f '%e %M'`` (wall seconds, peak resident memory). The default run is
quick; the big sizes are opt-in flags. The proof by construction runs ``plan`` of the
digits recipe (our sampler under torch's ``BatchSampler``) on synthetic datasets of
1e9 and 2**62 train samples on 16,384 ranks; each run checks that its output names
the proof it is meant to measure.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench_report import write_section

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CLI = str(Path(PYTHON).parent / 'composer-sampling')
DEVICE_BATCH = 64
AUDIT_RANKS = 64
RECORD = 1024


def ours_under_custom_batch(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int) -> Any:
    """The recipe's sampler: ``BatchShuffleSampler(BatchSampler(ResumableDistributedSampler))``, adapted."""
    from torch.utils.data import BatchSampler

    from composer_sampling import ResumableDistributedSampler
    from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler
    from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter

    inner = ResumableDistributedSampler(dataset, num_replicas, rank, seed=seed)
    return DistributedBatchAdapter(BatchShuffleSampler(BatchSampler(inner, device_batch_size, False), seed=seed))


def _env() -> dict[str, str]:
    paths = [str(ROOT), str(ROOT / 'scripts'), *filter(None, [os.environ.get('PYTHONPATH')])]
    return {**os.environ, 'PYTHONPATH': os.pathsep.join(paths)}


def run_once(command: list[str] | str, expect: str | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run, as ``/usr/bin/time`` reports them; raises if the command fails
    (or if its output lacks ``expect``, when given).

    ``/usr/bin/time`` forks a small process to run the command, so the peak is the
    command's own (a child forked from this Python would start at this process's size).
    """
    with tempfile.NamedTemporaryFile('r', suffix='.time') as report:
        shell = command if isinstance(command, str) else ' '.join(shlex.quote(part) for part in command)
        timed = ['/usr/bin/time', '-f', '%e %M', '-o', report.name, 'sh', '-c', shell]
        process = subprocess.run(timed, cwd=ROOT, env=_env(), stderr=subprocess.PIPE, check=False,
                                 stdout=subprocess.DEVNULL if expect is None else subprocess.PIPE)
        if process.returncode:
            raise RuntimeError(f'{shell} failed ({process.returncode}): {process.stderr.decode()[-2000:]}')
        if expect is not None and expect not in process.stdout.decode():
            raise RuntimeError(f'{shell}: the output does not say {expect!r}:\n{process.stdout.decode()[-2000:]}')
        wall, peak = report.read().split()[-2:]
    return float(wall), int(peak) / 1024


def plan_command(samples: int, ranks: int, epochs: int) -> list[str]:
    """``plan`` of ``samples`` train samples (the recipe holds out 20% for eval) on ``ranks`` ranks."""
    return [CLI, 'plan', 'yamls/custom-batch-sampler.yaml', '--world-size', str(ranks), '--epochs', str(epochs),
            f'train_loader.dataset={{name: synthetic, size: {samples * 5 // 4}}}',
            'train_loader.sampler={target: bench_proofs:ours_under_custom_batch}',
            f'global_train_batch_size={ranks * DEVICE_BATCH}', 'device_train_microbatch_size=16']


#: ``(train samples, ranks, epochs, proof, most runs)`` of the construction table: both sizes by construction, and
#: the counted proof of the same recipe at 1e8, for scale (once: it takes a minute).
CONSTRUCTION_CASES = [(10**9, 16384, 2, 'auto', 9), (2**62, 16384, 2, 'auto', 9), (10**8, 16384, 2, 'counted', 1)]


def construction_command(samples: int, ranks: int, epochs: int, proof: str) -> list[str]:
    """``plan`` of the digits recipe on ``samples`` synthetic train samples (the recipe holds out 20% for eval)."""
    return [CLI, 'plan', 'yamls/digits.yaml', '--world-size', str(ranks), '--epochs', str(epochs), '--proof', proof,
            f'train_loader.dataset={{name: synthetic, size: {samples * 5 // 4}}}',
            f'global_train_batch_size={ranks * DEVICE_BATCH}']


def bench_construction(repeats: int) -> list[str]:
    rows = ['| train samples | ranks | epochs | proof | runs | first run | median wall | peak RSS |',
            '| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |']
    for samples, ranks, epochs, proof, most in CONSTRUCTION_CASES:
        expect = 'proof: by construction' if proof == 'auto' else 'proof: counted'
        command = construction_command(samples, ranks, epochs, proof)
        runs = [run_once(command, expect) for _ in range(min(repeats, most))]
        wall, rss = _median(runs)
        label = '2**62' if samples == 2**62 else f'{samples:.0e}'
        rows.append(f'| {label} | {ranks:,} | {epochs} | {expect.split(": ")[1]} | {len(runs)} | {runs[0][0]:.1f} s | '
                    f'{wall:.1f} s | {rss:,.0f} MiB |')
        print(rows[-1], flush=True)
    return rows


def write_ledgers(folder: Path, samples: int) -> int:
    """One epoch of ``samples`` shuffled indices over ``AUDIT_RANKS`` ledgers; returns the bytes written."""
    from composer_sampling.ledger_format import LedgerWriter
    from composer_sampling.positions import global_indices

    share = samples // AUDIT_RANKS
    for rank in range(AUDIT_RANKS):
        header = dict(lineage='bench', attempt='a0', resumed_from=None, started=0.0, rank=rank,
                      world_size=AUDIT_RANKS, start_batch=0, start_epoch=0, dataset_len=share * AUDIT_RANKS,
                      padded=0, dropped=0, sub_epochs_per_epoch=1, run_name='bench')
        writer = LedgerWriter(folder / f'a0-rank{rank}.bin', header)
        for lo in range(0, share, 1 << 20):
            positions = np.arange(lo, min(lo + (1 << 20), share), dtype=np.int64) * AUDIT_RANKS + rank
            indices = global_indices(positions, share * AUDIT_RANKS, True, 0, 0)
            for at in range(0, indices.size, RECORD):
                writer.append(0, (lo + at) // RECORD + 1, indices[at:at + RECORD])
        writer.close()
    return sum(path.stat().st_size for path in folder.glob('*.bin'))


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _tree_rss(root: int) -> int:
    """The resident set size (KiB) of process ``root`` and all its descendants summed, read from /proc (an upper
    bound: a page shared between them, copy-on-write or the workers' shared planes, counts in each)."""
    parents: dict[int, int] = {}
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            fields = stat.read_text().rsplit(')', 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    total = 0
    for pid in tree:
        try:
            status = Path(f'/proc/{pid}/status').read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith('VmRSS:')), 0)
    return total


def run_plan(command: list[str], root: Path) -> tuple[float, float, float]:
    """Wall seconds, peak RSS of the biggest process (MiB, ``/usr/bin/time``) and peak RSS summed over the process
    tree (MiB, sampled every 0.2 s) of one ``plan`` run with the package at ``root``; raises if it fails."""
    env = {**_env(), 'PYTHONPATH': os.pathsep.join([str(root), str(ROOT / 'scripts')])}
    with tempfile.NamedTemporaryFile('r', suffix='.time') as report:
        timed = ['/usr/bin/time', '-f', '%e %M', '-o', report.name, *command]
        process = subprocess.Popen(timed, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        peak = 0
        while process.poll() is None:
            peak = max(peak, _tree_rss(process.pid))
            time.sleep(0.2)
        if process.returncode:
            raise RuntimeError(f'{shlex.join(command)} failed ({process.returncode}): '
                               f'{process.stderr.read().decode()[-2000:] if process.stderr else ""}')
        wall, rss = report.read().split()[-2:]
    return float(wall), int(rss) / 1024, peak / 1024


def bench_plan(cases: list[tuple[int, int, int, int]], base: Path | None) -> list[str]:
    roots = {'this branch': ROOT, **({f'`{base}`': base} if base is not None else {})}
    rows = ['| samples | ranks | epochs | code | runs | first run | median wall | peak RSS (biggest process) | '
            'peak RSS (all processes) | samples counted / s |',
            '| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |']
    for samples, ranks, epochs, repeats in cases:
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in roots}
        for _ in range(repeats):  # in turns, so that a drift of the machine falls on both
            for name, root in roots.items():
                runs[name].append(run_plan(plan_command(samples, ranks, epochs), root))
        for name, measured in runs.items():
            wall, rss, tree = (statistics.median(run[k] for run in measured) for k in range(3))
            rows.append(f'| {samples:.0e} | {ranks:,} | {epochs} | {name} | {repeats} | {measured[0][0]:.1f} s | '
                        f'{wall:.1f} s | {rss:,.0f} MiB | {tree:,.0f} MiB | {samples * epochs / wall:,.0f} |')
            print(rows[-1], flush=True)
    return rows


def plan_parts(samples: int = 10**9, ranks: int = 16384, probe: int = 32) -> list[str]:
    """CPU ns a sample of each part of the counted proof, on ``probe`` ranks of ``samples`` on ``ranks`` ranks."""
    from itertools import chain

    from composer_sampling._proofs.counting import RankOverlap
    from composer_sampling._proofs.coverage import RankTally

    samplers = [ours_under_custom_batch(samples, ranks, rank, 17, DEVICE_BATCH) for rank in range(probe)]
    clock = time.process_time
    started = clock()
    batches = [list(sampler) for sampler in samplers]
    iterated = clock() - started
    started = clock()
    arrays = [np.fromiter(chain.from_iterable(rank), dtype=np.int64) for rank in batches]
    converted = clock() - started
    count = sum(array.size for array in arrays)
    tally = RankTally(RankOverlap(samples))
    tally.counts.ranks.planes.fill(0)  # paged in first, as it is after the first ranks of a whole plan
    started = clock()
    for rank, array in enumerate(arrays):
        tally.add_rank(rank, [array], 0)
    counted = clock() - started
    other = RankOverlap(samples)
    other.ranks.once[:] = np.random.default_rng(0).integers(0, 256, other.ranks.once.size, dtype=np.uint8)
    other.ranks.twice.fill(0)
    started = clock()
    tally.counts.merge(other)
    merged = clock() - started
    rows = ['| part | CPU ns a sample |', '| --- | ---: |']
    for name, seconds, per in [
            ("iterating the user's batch sampler (`list` of its batches, our sampler's permutation included)",
             iterated, count),
            ('converting the batches to one array (`np.fromiter` over them)', converted, count),
            ('counting (`RankTally.add_rank`: a sort, the 2-bit planes)', counted, count),
            ('merging one worker\'s planes into another\'s, per sample of the dataset', merged, samples)]:
        rows.append(f'| {name} | {seconds / per * 1e9:,.1f} |')
    print('\n'.join(rows), flush=True)
    return rows


def _drop_cached(paths: list[Path]) -> None:
    """Ask the kernel to drop the files' cached pages, so that the next read comes from the disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def bench_audit(samples: int, repeats: int, against: str | None) -> list[str]:
    free = shutil.disk_usage(tempfile.gettempdir()).free
    needed = samples * 4 * 1.1 + 2**30
    note = ''
    if needed > free:
        scaled = int((free - 2**30) / 4.4) // AUDIT_RANKS * AUDIT_RANKS
        note = f' (scaled down from {samples:.0e}: {free / 2**30:.0f} GiB free in {tempfile.gettempdir()})'
        samples = scaled
    rows = ['| recorded samples | ledger bytes | files | command | runs | median wall | peak RSS | throughput | '
            'ratio to `cat` |',
            '| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |']
    with tempfile.TemporaryDirectory(prefix='bench-proofs-') as folder:
        size = write_ledgers(Path(folder), samples)
        paths = sorted(Path(folder).glob('*.bin'))
        files = ' '.join(str(path) for path in paths)
        commands: dict[str, list[str] | str] = {'`cat FILES > /dev/null` (floor)': f'cat {files} > /dev/null',
                                                '`composer-sampling audit FOLDER`': [CLI, 'audit', folder]}
        if against is not None:
            commands[f'the same, {against}\'s code'] = f'PYTHONPATH={shlex.quote(against)} {CLI} audit {folder}'
        for cache in ('warm', 'cold'):
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
            for _ in range(repeats):  # interleaved, so that a drift of the machine falls on all
                for name, command in commands.items():
                    if cache == 'cold':
                        _drop_cached(paths)
                    else:
                        run_once(f'cat {files} > /dev/null')  # warm whatever an earlier run left out
                    results[name].append(run_once(command))
            floor = _median(next(iter(results.values())))[0]
            for name, runs in results.items():
                wall, rss = _median(runs)
                rows.append(f'| {samples:.2e}{note} | {size / 2**30:.2f} GiB | {cache} | {name} | {repeats} | '
                            f'{wall:.1f} s | {rss:,.0f} MiB | {size / 2**20 / wall:,.0f} MiB/s | '
                            f'{wall / floor:.1f}x |')
                print(rows[-1], flush=True)
    return rows


def audit_notes(against: str | None) -> list[str]:
    """The lines under the audit table."""
    return [
        'Warm: the files are in the page cache (written just before, and read once by `cat` before each run). Cold: '
        'each file\'s cached pages are dropped with `posix_fadvise(DONTNEED)` just before the run, so the first '
        'read of each page comes from the disk (a virtual disk here, which may be cached by its host: files larger '
        'than the memory cannot be written on this disk). The audit reads every file twice (its record headers, '
        'then its records), so cold, the second read is warm. The time is the sort of each chunk of indices (about '
        '10 ns an index on this machine) and its gather and scatter into the 2-bit planes (N / 4 bytes); the '
        'checksums (zlib\'s CRC32, about 3 GB/s) and the reading are a small part. One process: a second worker '
        'process per ledger file bought nothing on this shared, fully loaded 2-core machine.',
        *([f'"{against}\'s code" is the audit of that checkout, timed in the same run.'] if against else []),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--plan-1e8', action='store_true', help='plan 1e8 samples on 1,024 ranks, 2 epochs (once)')
    parser.add_argument('--plan-1e9', action='store_true', help='plan 1e9 samples on 16,384 ranks, 2 epochs (once)')
    parser.add_argument('--plan-base', type=Path, metavar='DIR',
                        help='also run each plan case with the package of this checkout (e.g. main), in turns')
    parser.add_argument('--audit-samples', type=float, default=1e7, help='recorded samples to audit (1e9: 4 GB)')
    parser.add_argument('--construction-only', action='store_true',
                        help='only the proof by construction\'s cases: print their rows, write nothing')
    parser.add_argument('--audit-only', action='store_true', help='only the audit rows: print them, write nothing')
    parser.add_argument('--audit-against', metavar='TREE',
                        help='also time the audit of another checkout (e.g. main\'s, from git worktree add)')
    args = parser.parse_args()
    audit_repeats = args.repeats if args.audit_samples < 1e9 else 1
    if args.audit_only:
        bench_audit(int(args.audit_samples), audit_repeats, args.audit_against)
        return
    construction_rows = bench_construction(args.repeats)
    if args.construction_only:
        return
    cases = [(10**6, 1024, 2, args.repeats), (10**7, 1024, 2, args.repeats)]
    if args.plan_1e8:
        cases.append((10**8, 1024, 2, 1))
    if args.plan_1e9:
        cases.append((10**9, 16384, 2, 1))
    plan_rows = bench_plan(cases, args.plan_base)
    part_rows = plan_parts()
    audit_rows = bench_audit(int(args.audit_samples), audit_repeats, args.audit_against)
    flags = ''.join(f' --{flag}' for flag in ('plan-1e8', 'plan-1e9') if getattr(args, flag.replace('-', '_')))
    flags += f' --plan-base {args.plan_base}' if args.plan_base else ''
    command = (f'.venv/bin/python scripts/bench_proofs.py --repeats {args.repeats}{flags} '
               f'--audit-samples {args.audit_samples:.0e}'
               + (f' --audit-against {args.audit_against}' if args.audit_against else ''))
    body = '\n'.join([
        '### plan: the counted proof (our sampler under a batch-shuffling custom batch sampler)', '',
        *plan_rows, '',
        'Each run is the whole `composer-sampling plan` process: Python and torch start-up (about 2 s and 450 MiB, '
        'see bench_startup.py), building every rank\'s loader, iterating each rank\'s batches in Python and counting '
        'them, in worker processes forked after the loaders are built (one a core: `--workers` unset). "first run" is '
        'the first of the runs (the coldest file cache). The first peak RSS is the biggest single process\'s, the '
        'second sums every process of the run, sampled every 0.2 s (an upper bound: pages the plan and its workers '
        'share count in each).', '',
        'Where a sample\'s time goes, measured in one process on 32 ranks of the 1e9 case (CPU time, so the other '
        'jobs on the machine count less):', '',
        *part_rows, '',
        '### plan: the proof by construction (our sampler under torch\'s BatchSampler, digits recipe)', '',
        *construction_rows, '',
        'Whole `composer-sampling plan` processes again, 2 epochs: the time is start-up and building 16,384 loaders '
        'and their graphs; the proof itself is arithmetic on the parameters plus the guard (4,096 positions through '
        'the permutation and back per epoch, and the first indices of two ranks). The counted row is the same recipe '
        'with `--proof counted`.', '',
        '### audit: ledger files of one epoch, 64 ranks, 1,024 indices per record', '',
        *audit_rows, '',
        *audit_notes(args.audit_against),
    ])
    write_section('bench_proofs.py', command, body)


if __name__ == '__main__':
    main()
