"""Resume on the GPU: train the digits recipe whole, and stopped mid-epoch then resumed, and compare the two.

    .venv/bin/python scripts/check_gpu.py                                 # 1 GPU, and 2 when two are visible
    .venv/bin/python scripts/check_gpu.py --ranks 2 --workdir /tmp/check  # 2 ranks, the runs kept in /tmp/check
    .venv/bin/python scripts/check_gpu.py --device cpu                    # a dry run of the whole check (CPU, fp32)

For a machine with a GPU; not part of ``make test``. For each number of ranks (one
process, or the ``composer`` launcher for two), ``yamls/digits.yaml`` trains with
``device=gpu precision=amp_bf16`` three times, with ``callbacks.sample_ledger={}``:

* *whole*: 2 epochs without stopping;
* *stopped*: the same, ``max_duration`` at batch 30 (epoch 1, batch 7 of 23): it
  ends with the checkpoint of batch 30 (``save_interval`` is 10 batches);
* *resumed*: from that checkpoint (``load_path``) into the same folder, to 2 epochs.

Then it checks, and prints as a table: the stop fell mid-epoch; every rank trained
the same samples in every batch in both (their ledgers, read record by record); each
run's ``audit`` (:func:`composer_sampling.audit.audit_folder`) has every sample
exactly once per epoch; the final weights and optimizer state are the same. Recipes
have no field that turns determinism on, so every rank runs through this script
(``check_gpu.py train-rank``), which calls Composer's
``reproducibility.configure_deterministic_mode()`` (``torch.use_deterministic_algorithms(True)``,
``CUBLAS_WORKSPACE_CONFIG=:4096:8``) before ``composer_sampling.recipes.runner.main``;
the weights must then be equal bit for bit. If an operation refuses deterministic
mode, the runs are repeated without it and the largest absolute difference is
reported instead of a verdict. It exits 1 on any difference in the samples, on a
failed audit or run, and on weights that differ under deterministic mode.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / 'yamls' / 'digits.yaml'
SCRIPT = Path(__file__).resolve()
DURATION = '2ep'
STOP_AT = 30  # a global batch: digits trains 1438 samples at global batch 64, 23 batches an epoch
SAVE_EVERY = 10  # batches: the stopped run's last checkpoint is the one at STOP_AT
PRECISION = {'gpu': 'amp_bf16', 'cpu': 'fp32'}
TRAIN_RANK = 'train-rank'  # the first argument of the command every rank runs
DETERMINISTIC = '--deterministic'
#: What torch raises when deterministic mode meets an operation without a deterministic implementation.
NOT_DETERMINISTIC = ('does not have a deterministic implementation',)


@dataclass
class Row:
    ranks: int
    check: str
    ok: bool | None  # None: reported, not judged
    detail: str


@dataclass
class Case:
    """One number of ranks: its folder, the runs' settings and what the checks found."""

    ranks: int
    folder: Path
    overrides: list[str]
    deterministic: bool
    rows: list[Row] = field(default_factory=list)

    def add(self, check: str, ok: bool | None, detail: str) -> None:
        self.rows.append(Row(self.ranks, check, ok, detail))


# the command every rank runs ------------------------------------------------------------------------------


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


# pure helpers (tests/scripts/test_check_gpu.py) -------------------------------------------------------------


def default_ranks(device: str, visible_gpus: int) -> list[int]:
    """1 rank, and 2 when two GPUs are visible (on the CPU, gloo runs two ranks anywhere).

    Example:
        >>> default_ranks('gpu', 1), default_ranks('gpu', 8), default_ranks('cpu', 0)
        ([1], [1, 2], [1, 2])
    """
    return [1, 2] if device == 'cpu' or visible_gpus >= 2 else [1]


def device_overrides(device: str, precision: str | None) -> list[str]:
    """The recipe overrides that choose the device and the precision.

    Example:
        >>> device_overrides('gpu', None)
        ['device=gpu', 'precision=amp_bf16']
    """
    return [f'device={device}', f'precision={precision or PRECISION[device]}']


def run_overrides(folder: Path, run_name: str, common: Sequence[str]) -> list[str]:
    """The overrides of one run: its save folder (the ledger goes to ``folder/ledger``), checkpoints, ledger.

    Example:
        >>> run_overrides(Path('/w/whole'), 'whole', ['device=gpu'])[:3]
        ['save_folder=/w/whole', 'save_interval=10ba', 'run_name=whole']
    """
    return [f'save_folder={folder}', f'save_interval={SAVE_EVERY}ba', f'run_name={run_name}',
            'callbacks.sample_ledger={}', *common]


def _tensors(value: Any, path: str = '') -> Iterator[tuple[str, Any]]:
    """Every tensor (or number) inside nested dicts and lists, with its path."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _tensors(value[key], f'{path}/{key}')
    elif isinstance(value, list | tuple):
        for k, item in enumerate(value):
            yield from _tensors(item, f'{path}/{k}')
    else:
        yield path, value


def compare_states(first: dict[str, Any], second: dict[str, Any]) -> tuple[list[str], float]:
    """The paths whose tensors differ between two states, and the largest absolute difference among them.

    A path only one state has, or of another shape, counts as different (difference ``inf``).

    Example:
        >>> import torch
        >>> compare_states({'w': torch.ones(2)}, {'w': torch.tensor([1.0, 1.5])})
        (['/w'], 0.5)
        >>> compare_states({'w': torch.ones(2)}, {'w': torch.ones(2)})
        ([], 0.0)
    """
    import torch

    left, right = dict(_tensors(first)), dict(_tensors(second))
    differ, largest = [], 0.0
    for path in sorted(set(left) | set(right)):
        a, b = left.get(path), right.get(path)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                differ.append(path)
                largest = float('inf')
            elif not torch.equal(a, b):
                differ.append(path)
                if a.is_floating_point() or a.is_complex():
                    largest = max(largest, float((a.double() - b.double()).abs().max()))
                else:
                    largest = max(largest, float((a.long() - b.long()).abs().max()))
        elif path not in left or path not in right or type(a) is not type(b) or a != b:
            differ.append(path)
            largest = float('inf') if path not in left or path not in right else largest
    return differ, largest


def trained_batches(ledger_folder: Path) -> dict[tuple[int, int], tuple[int, tuple[int, ...]]]:
    """``(rank, batch) -> (epoch, indices)`` over every ledger file of the folder (every attempt of the run)."""
    from composer_sampling.ledger_format import read_ledger

    batches: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {}
    for path in sorted(ledger_folder.glob('*.bin')):
        ledger = read_ledger(path)
        rank = int(ledger.header['rank'])
        for record in ledger.trained:
            key = (rank, record.batch)
            if key in batches:
                raise ValueError(f'{path}: rank {rank} recorded batch {record.batch} twice in one run')
            batches[key] = (record.epoch, tuple(record.indices.tolist()))
    return batches


def sample_differences(whole: dict[Any, Any], resumed: dict[Any, Any]) -> list[str]:
    """What differs between two runs' ``trained_batches`` (at most five lines).

    Example:
        >>> sample_differences({(0, 1): (0, (3, 1))}, {(0, 1): (0, (3, 1)), (0, 2): (0, (2,))})
        ['rank 0 batch 2: only in the resumed run']
    """
    problems = []
    for rank, batch in sorted(set(whole) | set(resumed)):
        a, b = whole.get((rank, batch)), resumed.get((rank, batch))
        if a is None or b is None:
            problems.append(f'rank {rank} batch {batch}: only in the {"resumed" if a is None else "whole"} run')
        elif a != b:
            problems.append(f'rank {rank} batch {batch}: epoch {a[0]} {list(a[1])[:6]}... against '
                            f'epoch {b[0]} {list(b[1])[:6]}...')
    return problems[:5] + ([f'... and {len(problems) - 5} more'] if len(problems) > 5 else [])


# running -----------------------------------------------------------------------------------------------------


def _environment() -> dict[str, str]:
    """This environment without a launcher's rank variables, with cuBLAS's deterministic workspace."""
    launched = ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'NODE_RANK', 'MASTER_ADDR', 'MASTER_PORT')
    env = {key: value for key, value in os.environ.items() if key not in launched}
    env['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'
    env['PYTHONWARNINGS'] = 'ignore'
    return env


def train(case: Case, name: str, run_name: str, folder: Path, extra: Sequence[str]) -> tuple[bool, str]:
    """Run one recipe run (logs named ``name``) on ``case.ranks`` ranks; (whether it exited 0, all its output)."""
    arguments = [TRAIN_RANK, *([DETERMINISTIC] if case.deterministic else []), str(RECIPE),
                 *run_overrides(folder, run_name, case.overrides), *extra]
    logs = case.folder / 'logs'
    logs.mkdir(parents=True, exist_ok=True)
    if case.ranks == 1:
        command = [sys.executable, str(SCRIPT), *arguments]
    else:
        launcher = str(Path(sys.executable).parent / 'composer')
        command = [launcher, '-n', str(case.ranks), '--stdout', str(logs / f'{name}-rank{{rank}}.out'),
                   '--stderr', str(logs / f'{name}-rank{{rank}}.err'), str(SCRIPT), *arguments]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=_environment(), capture_output=True, text=True)
    ranks = ''.join(path.read_text(errors='replace') for path in sorted(logs.glob(f'{name}-rank*.*')))
    output = result.stdout + result.stderr + ranks
    (logs / f'{name}.log').write_text(' '.join(command) + '\n\n' + output)
    print(f'  {case.ranks} rank(s), {name}: exit {result.returncode} in {time.perf_counter() - started:.0f} s '
          f'(log {logs / f"{name}.log"})', flush=True)
    return result.returncode == 0, output


def _final_state(folder: Path) -> dict[str, Any]:
    import torch

    state = torch.load(folder / 'latest-rank0.pt', map_location='cpu', weights_only=False)['state']
    return {'model': state['model'], 'optimizers': state['optimizers']}


def _audit_detail(folder: Path) -> tuple[bool, str]:
    """Every epoch of the run's ledger has every sample exactly once (and nothing repeated or missing)."""
    from composer_sampling.audit import audit_folder

    report = audit_folder(folder / 'ledger')
    epochs = [f'epoch {e.epoch}: {e.exactly_once}/{report.dataset_len} once, {e.repeated} repeated, '
              f'{e.missing} missing' for e in report.epochs]
    ok = bool(report.epochs) and all(e.exactly_once == report.dataset_len and not e.repeated and not e.missing
                                     for e in report.epochs)
    return ok, '; '.join(epochs) or 'no epoch recorded'


def check_case(case: Case) -> None:
    """Train whole, stopped and resumed on ``case.ranks`` ranks, and compare (rows added to ``case``)."""
    whole, resumed = case.folder / 'whole', case.folder / 'resumed'
    runs = [('whole', whole, [f'max_duration={DURATION}']),
            ('stopped', resumed, [f'max_duration={STOP_AT}ba']),
            ('resumed', resumed, [f'max_duration={DURATION}', f'load_path={resumed}/latest-rank{{rank}}.pt'])]
    for name, folder, extra in runs:
        ok, output = train(case, name, folder.name, folder, extra)  # the stopped run is the resumed one's start
        if not ok:
            case.add(f'{name} run', False, _last_error(output)[:200])
            return
    case.add('runs', True, f'whole {DURATION}; stopped at batch {STOP_AT}; resumed from its checkpoint to {DURATION}')

    first, second = trained_batches(whole / 'ledger'), trained_batches(resumed / 'ledger')
    epochs = {batch: epoch for (_, batch), (epoch, _) in second.items()}
    mid_epoch = epochs.get(STOP_AT) is not None and epochs.get(STOP_AT) == epochs.get(STOP_AT + 1)
    case.add('stop mid-epoch', mid_epoch, f'batches {STOP_AT} and {STOP_AT + 1} in epoch {epochs.get(STOP_AT)}'
             if mid_epoch else f'batch {STOP_AT} in epoch {epochs.get(STOP_AT)}, {STOP_AT + 1} in '
             f'{epochs.get(STOP_AT + 1)}: not mid-epoch')
    problems = sample_differences(first, second)
    batches = len({batch for _, batch in first})
    case.add('samples (ledger)', not problems, '; '.join(problems) if problems else
             f'{batches} batches x {case.ranks} rank(s): the same indices in the same order')
    for name, folder in (('whole', whole), ('resumed', resumed)):
        ok, detail = _audit_detail(folder)
        case.add(f'audit {name}', ok, detail)

    differ, largest = compare_states(_final_state(whole), _final_state(resumed))
    if case.deterministic:
        case.add('weights, optimizer', not differ, 'bit for bit (deterministic mode)' if not differ else
                 f'{len(differ)} tensors differ (first {differ[0]}), max abs difference {largest:.3g}')
    else:
        case.add('weights, optimizer', None, f'max abs difference {largest:.3g} over {len(differ)} differing tensors '
                 '(deterministic mode refused: not judged)')


def _last_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if 'Error' in line or line.startswith('error:')]
    return (errors or lines or ['no output'])[-1][:300]


def _refused_determinism(case: Case) -> bool:
    logs = case.folder / 'logs'
    text = ''.join(path.read_text(errors='replace') for path in logs.glob('*.log')) if logs.exists() else ''
    return any(marker in text for marker in NOT_DETERMINISTIC)


def print_table(rows: list[Row]) -> None:
    from tabulate import tabulate

    verdict = {True: 'ok', False: 'FAIL', None: 'reported'}
    print('\n' + tabulate([(row.ranks, row.check, verdict[row.ok], row.detail) for row in rows],
                          headers=['ranks', 'check', 'result', 'detail'], tablefmt='github'))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--device', choices=['gpu', 'cpu'], default='gpu',
                        help='gpu (the check) or cpu (a dry run of the same logic); default gpu')
    parser.add_argument('--precision', choices=['fp32', 'amp_fp16', 'amp_bf16', 'amp_fp8'], default=None,
                        help=f'default {PRECISION["gpu"]} on the GPU, {PRECISION["cpu"]} on the CPU')
    parser.add_argument('--ranks', type=int, nargs='+', choices=[1, 2], default=None,
                        help='1 and/or 2; default 1, and 2 when two GPUs are visible (cpu: 1 and 2)')
    parser.add_argument('--workdir', type=Path, default=None,
                        help='where the runs go (kept); default a new temporary folder')
    args = parser.parse_args(argv)

    import torch

    visible = torch.cuda.device_count()
    if args.device == 'gpu' and not torch.cuda.is_available():
        parser.error('--device gpu: torch sees no GPU (torch.cuda.is_available() is False); use --device cpu '
                     'for a dry run')
    ranks = args.ranks or default_ranks(args.device, visible)
    if args.device == 'gpu' and max(ranks) > visible:
        parser.error(f'--ranks {max(ranks)}: {visible} GPU(s) visible; one GPU a rank')
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix='check-gpu-'))
    taken = [workdir / f'ranks{n}' for n in ranks if (workdir / f'ranks{n}').exists()]
    if taken:
        parser.error(f'--workdir {workdir}: {taken[0]} exists; give a new or empty --workdir')
    common = device_overrides(args.device, args.precision)
    print(f'check_gpu: {RECIPE.relative_to(ROOT)} {" ".join(common) or "(recipe device)"}, ranks {ranks}, '
          f'GPUs visible {visible}, runs in {workdir}', flush=True)

    rows: list[Row] = []
    for n in ranks:
        case = Case(n, workdir / f'ranks{n}', common, deterministic=True)
        check_case(case)
        if any(row.ok is False for row in case.rows) and _refused_determinism(case):
            print(f'  {n} rank(s): an operation refused deterministic mode; running again without it', flush=True)
            case = Case(n, workdir / f'ranks{n}-free', common, deterministic=False)
            check_case(case)
        rows += case.rows
    print_table(rows)
    failed = [row for row in rows if row.ok is False]
    print(f'\n{"FAILED: " + str(len(failed)) + " check(s)" if failed else "all checks passed"} (runs in {workdir})')
    return 1 if failed else 0


if __name__ == '__main__':
    if sys.argv[1:2] == [TRAIN_RANK]:
        sys.exit(train_rank(sys.argv[2:]))
    sys.exit(main())
