"""The GPU check: exact resume (plain and FSDP2), what our callbacks cost a step, and a resume against the spin.

    python scripts/check_gpu.py                              # every part on the GPU
    python scripts/check_gpu.py --device cpu                 # a dry run of every part on the CPU
    python scripts/check_gpu.py --parts resume fsdp2         # some parts only
    python scripts/check_gpu.py --out results                # also results/check_gpu.json and results/check_gpu.md
    scripts/gpu/run_on_device.sh                             # on a GPU machine without network (carried wheels)

For a machine with a GPU; not part of ``make test`` (``make gpu-rehearsal`` runs it on
the CPU, on the GPU machine's versions). The parts, each a module of ``scripts/gpu/``:

* ``resume`` (``gpu/resume.py``): ``yamls/digits.yaml`` with ``device=gpu
  precision=amp_bf16`` trained whole, stopped mid-epoch and resumed, on one rank and on
  two when two GPUs are visible; the same samples batch for batch (the ledgers), each
  run's audit, and the final weights and optimizer state bit for bit under Composer's
  deterministic mode (if an operation refuses it, the runs are repeated without it and
  the largest difference is reported instead);
* ``fsdp2``: the same on one rank with FSDP2 (``parallelism_config.fsdp`` under
  ``FSDP_VERSION=2``) and sharded checkpoints;
* ``cost`` (``gpu/cost.py``): SamplerSync and SampleLedger per step of a 51M-parameter
  MLP, from batch 256 up to a step of 5 ms, against an empty callback, side by side in
  this process; the target is under 0.1% of the step each;
* ``spin`` (``gpu/spin.py``): a resume at batch 1,000 of an epoch, Composer's spin
  against SamplerSync: time to the first batch, and samples read;
* ``lightning`` (``gpu/lightning.py``): a Lightning ``Trainer`` with our Lightning
  SamplerSync, in ``bf16-mixed`` under ``deterministic=True``, whole, stopped after a
  mid-epoch checkpoint and resumed; the same batches and the final weights and optimizer
  state bit for bit, for our sampler and for a user's batch sampler with 2 workers. It
  needs no Composer.

It prints one table and exits 1 when a check fails: a run that fails, other samples,
a failed audit, weights that differ under deterministic mode, a SamplerSync resume
that reads trained samples again. A cost over its target is said, not failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

from gpu.resume import (
    DETERMINISTIC,
    FSDP2,
    PRECISION,
    TRAIN_RANK,
    Case,
    check_case,
    default_ranks,
    device_overrides,
    refused_determinism,
)
from gpu.table import FAIL, Row, failed, machine, render, write_result

PARTS = ('resume', 'fsdp2', 'cost', 'spin', 'lightning')


def train_rank(argv: list[str]) -> int:
    """``check_gpu.py train-rank [--deterministic] RECIPE [field=value ...]``: one rank of a run.

    Deterministic mode must be set before any CUDA work, hence before the runner
    builds anything; then the recipe runs as ``composer-sampling train`` runs it.
    """
    if argv[:1] == [DETERMINISTIC]:
        from composer.utils import reproducibility

        reproducibility.configure_deterministic_mode()
        argv = argv[1:]
    from composer_sampling.recipes.runner import main as run_recipe

    return run_recipe(argv)


def run_case(case: Case) -> list[Row]:
    """The case's rows; run again without deterministic mode when an operation refused it."""
    check_case(case)
    if any(row.result == FAIL for row in case.rows) and refused_determinism(case):
        print(f'  {case.part}: an operation refused deterministic mode; running again without it', flush=True)
        case = Case(case.part, case.ranks, case.folder.with_name(case.folder.name + '-free'), case.overrides,
                    deterministic=False, sharded=case.sharded)
        check_case(case)
    return case.rows


def resume_part(args: argparse.Namespace) -> list[Row]:
    common = device_overrides(args.device, args.precision)
    return [row for n in args.ranks for row in
            run_case(Case(f'resume, {n} rank{"s" if n > 1 else ""}', n, args.workdir / f'ranks{n}', common, True))]


def fsdp2_part(args: argparse.Namespace) -> list[Row]:
    common = [*device_overrides(args.device, args.precision), FSDP2['override']]
    return run_case(Case('FSDP2, 1 rank', 1, args.workdir / 'fsdp2', common, True, sharded=True))


def cost_part(args: argparse.Namespace) -> list[Row]:
    from gpu.cost import SIZES, calibrated, cost_rows, measure

    precision = args.precision or PRECISION[args.device]
    size = calibrated(SIZES[args.device], args.device, precision)
    return cost_rows(measure(size, args.device, precision, args.rounds), size, precision)


def spin_part(args: argparse.Namespace) -> list[Row]:
    from bench_resume import BATCH
    from gpu.spin import measure, spin_rows

    return spin_rows(measure(args.device, args.repeats), BATCH)


def lightning_part(args: argparse.Namespace) -> list[Row]:
    from gpu.lightning import measure

    return measure(args.device, args.workdir / 'lightning')


RUNNERS: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    'resume': resume_part, 'fsdp2': fsdp2_part, 'cost': cost_part, 'spin': spin_part, 'lightning': lightning_part}


def run_part(part: str, args: argparse.Namespace) -> list[Row]:
    """A part's rows; a part that raises is one failed row naming the error (the traceback is printed)."""
    started = time.perf_counter()
    print(f'{part}:', flush=True)
    try:
        rows = RUNNERS[part](args)
    except Exception as error:  # one part's failure must not hide the others' results
        traceback.print_exc()
        rows = [Row(part, 'part', FAIL, f'{type(error).__name__}: {error}'[:300])]
    print(f'{part}: {time.perf_counter() - started:.0f} s', flush=True)
    return rows


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--device', choices=['gpu', 'cpu'], default='gpu',
                        help='gpu (the check) or cpu (a dry run of the same logic); default gpu')
    parser.add_argument('--precision', choices=['fp32', 'amp_fp16', 'amp_bf16', 'amp_fp8'], default=None,
                        help=f'default {PRECISION["gpu"]} on the GPU, {PRECISION["cpu"]} on the CPU')
    parser.add_argument('--parts', nargs='+', choices=PARTS, default=list(PARTS), help='default: all of them')
    parser.add_argument('--ranks', type=int, nargs='+', choices=[1, 2], default=None,
                        help='the resume part\'s ranks, 1 and/or 2; default 1, and 2 when two GPUs are visible '
                             '(cpu: 1 and 2)')
    parser.add_argument('--rounds', type=int, default=5, help='the cost part\'s timed rounds (default 5)')
    parser.add_argument('--repeats', type=int, default=3, help='the spin part\'s timed resumes (default 3)')
    parser.add_argument('--workdir', type=Path, default=None,
                        help='where the runs go (kept); default a new temporary folder')
    parser.add_argument('--out', type=Path, default=None,
                        help='a folder for check_gpu.json (every row, the versions) and check_gpu.md (the table)')
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        parser.error(f'--rounds and --repeats must be at least 1, got {args.rounds} and {args.repeats}')

    import torch

    args.visible = torch.cuda.device_count()
    if args.device == 'gpu' and not torch.cuda.is_available():
        parser.error('--device gpu: torch sees no GPU (torch.cuda.is_available() is False); use --device cpu '
                     'for a dry run')
    args.ranks = args.ranks or default_ranks(args.device, args.visible)
    if args.device == 'gpu' and max(args.ranks) > args.visible:
        parser.error(f'--ranks {max(args.ranks)}: {args.visible} GPU(s) visible; one GPU a rank')
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix='check-gpu-'))
    taken = [path for path in (args.workdir / name for name in ('ranks1', 'ranks2', 'fsdp2', 'lightning'))
             if path.exists()]
    if taken:
        parser.error(f'--workdir {args.workdir}: {taken[0]} exists; give a new or empty --workdir')
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    warnings.simplefilter('ignore', UserWarning)  # Composer's notes on every Trainer; the runs' logs keep theirs
    settings = (f'device {args.device}, precision {args.precision or PRECISION[args.device]}, parts '
                f'{" ".join(args.parts)}, resume ranks {args.ranks}, GPUs visible {args.visible}')
    print(f'check_gpu: {settings}; runs in {args.workdir}', flush=True)
    started = time.perf_counter()
    rows = [row for part in args.parts for row in run_part(part, args)]
    seconds = time.perf_counter() - started
    print('\n' + render(rows))
    bad = failed(rows)
    print(f'\n{f"FAILED: {len(bad)} check(s)" if bad else "all checks passed"} in {seconds:.0f} s '
          f'(runs in {args.workdir})')
    if args.out is not None:
        about = {'summary': f'{settings}; {seconds:.0f} s', 'settings': {key: str(value) for key, value in
                 vars(args).items()}, 'machine': machine(), 'seconds': round(seconds, 1)}
        for path in write_result(args.out, rows, about):
            print(f'wrote {path}')
    return 1 if bad else 0


if __name__ == '__main__':
    if sys.argv[1:2] == [TRAIN_RANK]:
        sys.exit(train_rank(sys.argv[2:]))
    sys.exit(main())
