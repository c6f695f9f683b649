"""The digits recipe trained whole, stopped mid-epoch and resumed, compared sample for sample and bit for bit.

A :class:`Case` is one way to train it: on one or two ranks, plain or with FSDP2 and
sharded checkpoints (``parallelism_config.fsdp`` under ``FSDP_VERSION=2``, on one
rank). :func:`check_case` trains it three times with ``callbacks.sample_ledger={}``:

* *whole*: 2 epochs without stopping;
* *stopped*: the same, ``max_duration`` at batch 30 (epoch 1, batch 7 of 23): it ends
  with the checkpoint of batch 30 (``save_interval`` is 10 batches);
* *resumed*: from that checkpoint (``load_path``) into the same folder, to 2 epochs.

Then it adds rows: the stop fell mid-epoch; every rank trained the same samples in
every batch in both runs (their ledgers, read record by record); each run's ``audit``
has every sample exactly once per epoch; the final weights and optimizer state are the
same. Recipes have no field that turns determinism on, so every rank runs through
``check_gpu.py train-rank``, which calls Composer's
``reproducibility.configure_deterministic_mode()`` before the recipe runner; the weights
must then be equal bit for bit. A sharded checkpoint is read whole with torch's
``dcp_to_torch_save``.

Example:
    >>> run_overrides(Path('/w/whole'), 'whole', ['device=gpu'])[:3]
    ['save_folder=/w/whole', 'save_interval=10ba', 'run_name=whole']
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu.table import FAIL, REPORTED, Row, verdict

__all__ = ['DETERMINISTIC', 'FSDP2', 'PRECISION', 'TRAIN_RANK', 'Case', 'check_case', 'compare_states',
           'default_ranks', 'device_overrides', 'final_state', 'refused_determinism', 'resume_overrides',
           'run_overrides', 'sample_differences', 'trained_batches']

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / 'yamls' / 'digits.yaml'
CHECK = ROOT / 'scripts' / 'check_gpu.py'
DURATION = '2ep'
STOP_AT = 30  # a global batch: digits trains 1438 samples at global batch 64, 23 batches per epoch
SAVE_EVERY = 10  # batches: the stopped run's last checkpoint is the one at STOP_AT
PRECISION = {'gpu': 'amp_bf16', 'cpu': 'fp32'}
TRAIN_RANK = 'train-rank'  # the first argument of the command every rank runs
DETERMINISTIC = '--deterministic'
#: The recipe override and the environment that train with Composer's FSDP2 and sharded checkpoints.
FSDP2 = {'override': 'parallelism_config={fsdp: {state_dict_type: sharded}}', 'env': {'FSDP_VERSION': '2'}}
#: What torch raises when deterministic mode meets an operation without a deterministic implementation.
NOT_DETERMINISTIC = ('does not have a deterministic implementation',)
#: The variables a launcher sets for its ranks: a run started from here must not inherit them.
LAUNCHED = ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'NODE_RANK', 'MASTER_ADDR', 'MASTER_PORT')


@dataclass
class Case:
    """One way to train the recipe: its name in the table, ranks, folder, overrides, and the rows it adds."""

    part: str
    ranks: int
    folder: Path
    overrides: list[str]
    deterministic: bool
    sharded: bool = False
    rows: list[Row] = field(default_factory=list)

    def add(self, check: str, result: str, detail: str) -> None:
        self.rows.append(Row(self.part, check, result, detail))

    def environment(self) -> dict[str, str]:
        """This environment without a launcher's rank variables, with cuBLAS's deterministic workspace, and
        ``FSDP_VERSION=2`` for a sharded case."""
        env = {key: value for key, value in os.environ.items() if key not in LAUNCHED}
        env['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'
        env['PYTHONWARNINGS'] = 'ignore'
        if self.sharded:
            env.update(FSDP2['env'])
        return env


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
    """The overrides of one run: its save folder (the ledger goes to ``folder/ledger``), checkpoints, ledger."""
    return [f'save_folder={folder}', f'save_interval={SAVE_EVERY}ba', f'run_name={run_name}',
            'callbacks.sample_ledger={}', *common]


def resume_overrides(folder: Path, sharded: bool) -> list[str]:
    """How the resumed run loads the stopped run's last checkpoint.

    Composer formats ``{rank}`` in a single-file ``load_path`` only; a sharded one is
    the folder every rank reads (``latest-rank0.pt`` links to it), which the recipe
    runner checks on every rank before Composer reads it.

    Example:
        >>> resume_overrides(Path('/w/resumed'), sharded=True)
        ['load_path=/w/resumed/latest-rank0.pt']
    """
    if sharded:
        return [f'load_path={folder}/latest-rank0.pt']
    return [f'load_path={folder}/latest-rank{{rank}}.pt']


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


def final_state(checkpoint: Path) -> dict[str, Any]:
    """The model and optimizer state of a checkpoint: a single file, or a sharded folder read whole.

    A sharded checkpoint (a ``torch.distributed.checkpoint`` folder, which ``latest-rank0.pt``
    links to) is turned into one file by torch's ``dcp_to_torch_save`` in one process,
    every shard put together, then loaded like a single file.
    """
    import torch

    if checkpoint.is_dir():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as scratch:
            whole = Path(scratch) / 'whole.pt'
            dcp_to_torch_save(str(checkpoint), str(whole))
            state = torch.load(whole, map_location='cpu', weights_only=False)['state']
    else:
        state = torch.load(checkpoint, map_location='cpu', weights_only=False)['state']
    return {'model': state['model'], 'optimizers': state['optimizers']}


def train(case: Case, name: str, run_name: str, folder: Path, extra: Sequence[str]) -> tuple[bool, str]:
    """Run one recipe run (logs named ``name``) on ``case.ranks`` ranks; (whether it exited 0, all its output)."""
    arguments = [TRAIN_RANK, *([DETERMINISTIC] if case.deterministic else []), str(RECIPE),
                 *run_overrides(folder, run_name, case.overrides), *extra]
    logs = case.folder / 'logs'
    logs.mkdir(parents=True, exist_ok=True)
    if case.ranks == 1:
        command = [sys.executable, str(CHECK), *arguments]
    else:  # the launcher as a module: installed with pip --target, its console script is not on the PATH
        command = [sys.executable, '-m', 'composer.cli.launcher', '-n', str(case.ranks),
                   '--stdout', str(logs / f'{name}-rank{{rank}}.out'),
                   '--stderr', str(logs / f'{name}-rank{{rank}}.err'), str(CHECK), *arguments]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=case.environment(), capture_output=True, text=True)
    ranks = ''.join(path.read_text(errors='replace') for path in sorted(logs.glob(f'{name}-rank*.*')))
    output = result.stdout + result.stderr + ranks
    (logs / f'{name}.log').write_text(' '.join(command) + '\n\n' + output)
    print(f'  {case.part}, {name}: exit {result.returncode} in {time.perf_counter() - started:.0f} s '
          f'(log {logs / f"{name}.log"})', flush=True)
    return result.returncode == 0, output


def _audit_detail(folder: Path) -> tuple[bool, str]:
    """Every epoch of the run's ledger has every sample exactly once (and nothing repeated or missing)."""
    from composer_sampling.audit import audit_folder

    report = audit_folder(folder / 'ledger')
    epochs = [f'epoch {e.epoch}: {e.exactly_once}/{report.dataset_len} once, {e.repeated} repeated, '
              f'{e.missing} missing' for e in report.epochs]
    ok = bool(report.epochs) and all(e.exactly_once == report.dataset_len and not e.repeated and not e.missing
                                     for e in report.epochs)
    return ok, '; '.join(epochs) or 'no epoch recorded'


def last_error(output: str) -> str:
    """The last line of a run's output that names an error (else its last line).

    Example:
        >>> last_error('training\\nValueError: bad\\ndone')
        'ValueError: bad'
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if 'Error' in line or line.startswith('error:')]
    return (errors or lines or ['no output'])[-1][:300]


def check_case(case: Case) -> None:
    """Train whole, stopped and resumed as ``case`` says, and compare (rows added to ``case``)."""
    whole, resumed = case.folder / 'whole', case.folder / 'resumed'
    runs = [('whole', whole, [f'max_duration={DURATION}']),
            ('stopped', resumed, [f'max_duration={STOP_AT}ba']),
            ('resumed', resumed, [f'max_duration={DURATION}', *resume_overrides(resumed, case.sharded)])]
    for name, folder, extra in runs:
        ok, output = train(case, name, folder.name, folder, extra)  # the stopped run is the resumed one's start
        if not ok:
            case.add(f'{name} run', FAIL, last_error(output)[:200])
            return
    kind = 'sharded checkpoint (FSDP2)' if case.sharded else 'checkpoint'
    case.add('runs', verdict(True), f'whole {DURATION}; stopped at batch {STOP_AT}; resumed from its {kind} '
             f'to {DURATION}')

    first, second = trained_batches(whole / 'ledger'), trained_batches(resumed / 'ledger')
    epochs = {batch: epoch for (_, batch), (epoch, _) in second.items()}
    mid_epoch = epochs.get(STOP_AT) is not None and epochs.get(STOP_AT) == epochs.get(STOP_AT + 1)
    case.add('stop mid-epoch', verdict(mid_epoch), f'batches {STOP_AT} and {STOP_AT + 1} in epoch '
             f'{epochs.get(STOP_AT)}' if mid_epoch else f'batch {STOP_AT} in epoch {epochs.get(STOP_AT)}, '
             f'{STOP_AT + 1} in {epochs.get(STOP_AT + 1)}: not mid-epoch')
    problems = sample_differences(first, second)
    batches = len({batch for _, batch in first})
    case.add('samples (ledger)', verdict(not problems), '; '.join(problems) if problems else
             f'{batches} batches x {case.ranks} rank(s): the same indices in the same order')
    for name, folder in (('whole', whole), ('resumed', resumed)):
        ok, detail = _audit_detail(folder)
        case.add(f'audit {name}', verdict(ok), detail)

    differ, largest = compare_states(final_state(whole / 'latest-rank0.pt'), final_state(resumed / 'latest-rank0.pt'))
    if case.deterministic:
        case.add('weights, optimizer', verdict(not differ), 'bit for bit (deterministic mode)' if not differ else
                 f'{len(differ)} tensors differ (first {differ[0]}), max abs difference {largest:.3g}')
    else:
        case.add('weights, optimizer', REPORTED, f'max abs difference {largest:.3g} over {len(differ)} differing '
                 'tensors (deterministic mode refused: not judged)')


def refused_determinism(case: Case) -> bool:
    """Whether a run of ``case`` stopped because an operation has no deterministic implementation."""
    logs = case.folder / 'logs'
    text = ''.join(path.read_text(errors='replace') for path in logs.glob('*.log')) if logs.exists() else ''
    return any(marker in text for marker in NOT_DETERMINISTIC)
