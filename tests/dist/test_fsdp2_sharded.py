"""FSDP2 on two ranks (gloo on the CPU), resumed mid-epoch from a sharded checkpoint: the run that never stopped.

This runs inside the launch of tests/neighbours/test_launcher.py (``composer -n 2 -m
pytest tests/dist``), so it pays for no launch of its own. Composer 0.32.1 builds FSDP2
from ``parallelism_config.fsdp`` under ``FSDP_VERSION=2``, and saves sharded checkpoints:
a ``torch.distributed.checkpoint`` folder with one ``.distcp`` file from each rank. The
resumed run names the save folder's ``latest-rank0.pt`` link without ``trust_checkpoint``:
every rank checks the folder before Composer reads it. Every rank trains through
tests/support/fault_train.py, which logs each dataset read and each trained batch.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from composer.utils import dist

from composer_sampling.audit import audit_folder

from support.fault_train import main as fault_train

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'scripts'))  # scripts/gpu, whose resume check reads runs as this test does

from gpu.resume import compare_states, final_state, sample_differences, trained_batches  # noqa: E402

pytestmark = pytest.mark.world_size(2)

#: The digits recipe on 400 synthetic samples: 320 trained at global batch 64, 5 batches per epoch, 2 epochs.
COMMON = [str(ROOT / 'yamls' / 'digits.yaml'), 'train_loader.dataset={name: synthetic, size: 400}', 'device=cpu',
          'parallelism_config={fsdp: {state_dict_type: sharded}}', 'callbacks.sample_ledger={}', 'save_interval=7ba',
          'eval_interval=2ep']
SAMPLES, EPOCHS, STOP = 320, 2, 7  # the stopped run ends at global batch 7: epoch 1, 2 batches in


def _records(folder: Path, kind: str) -> list[dict[str, Any]]:
    """Every rank's ``kind`` lines (``trained`` or ``reads``) that fault_train wrote into ``folder``."""
    return [json.loads(line) for path in sorted(folder.glob(f'{kind}-*.jsonl'))
            for line in path.read_text().splitlines() if line.strip()]


def _problems(folder: Path) -> list[str]:
    """What differs between the run that never stopped and the resumed one (empty: nothing)."""
    whole, resumed = folder / 'whole', folder / 'resumed'
    problems = []
    latest = (resumed / 'latest-rank0.pt').resolve()
    if latest.name != 'ep2-ba10' or sorted(path.name for path in latest.glob('*.distcp')) != \
            ['__0_0.distcp', '__1_0.distcp']:
        problems.append(f'the resumed run ended at {latest}, holding {sorted(p.name for p in latest.iterdir())}')
    stopped = _records(folder / 'logs-stopped', 'trained')
    if {(r['batch'], r['epoch']) for r in stopped if r['batch'] >= STOP} != {(STOP, 1)}:
        ended = sorted({(r['batch'], r['epoch']) for r in stopped})[-1:]
        problems.append(f'the stopped run did not end at batch {STOP} in epoch 1: (batch, epoch) {ended}')
    problems += sample_differences(trained_batches(whole / 'ledger'), trained_batches(resumed / 'ledger'))
    trained = _records(folder / 'logs-resumed', 'trained')
    if min(r['batch'] for r in trained) != STOP + 1:
        problems.append(f'the resumed run started at batch {min(r["batch"] for r in trained)}, not {STOP + 1}')
    already = {index for r in stopped if r['epoch'] == 1 for index in r['indices']}
    reads = collections.Counter(r['read'] for r in _records(folder / 'logs-resumed', 'reads'))
    if already & set(reads):
        problems.append(f'the resumed run read {len(already & set(reads))} samples trained before the stop again')
    if sum(reads.values()) != sum(len(r['indices']) for r in trained):
        problems.append(f'the resumed run read {sum(reads.values())} samples, trained '
                        f'{sum(len(r["indices"]) for r in trained)}')
    report = audit_folder(resumed / 'ledger')
    counts = [(e.exactly_once, e.repeated, e.missing) for e in report.epochs]
    if report.dataset_len != SAMPLES or counts != [(SAMPLES, 0, 0)] * EPOCHS:
        problems.append(f'the audit of {report.dataset_len} samples: (once, repeated, missing) by epoch {counts}')
    differ, largest = compare_states(final_state(whole / 'latest-rank0.pt'), final_state(latest))
    if differ:
        problems.append(f'{len(differ)} tensors of the weights and optimizer state differ (first {differ[0]}, by '
                        f'up to {largest:.3g})')
    return problems


def test_fsdp2_resumes_from_a_sharded_checkpoint_as_the_run_that_never_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole, stopped mid-epoch at a sharded checkpoint, resumed from it: the same batches on each rank (the
    ledgers), no sample read again, every sample once an epoch in the audit, the same weights and optimizer state
    (``torch.equal``, each sharded checkpoint read whole)."""
    monkeypatch.setenv('FSDP_VERSION', '2')
    dist.initialize_dist('cpu', timeout=60)  # a no-op once a Trainer has done it
    folder = Path(dist.all_gather_object(str(tmp_path))[0])  # rank 0's: one save folder for both ranks
    runs = [('whole', ['max_duration=2ep', f'save_folder={folder / "whole"}']),
            ('stopped', [f'max_duration={STOP}ba', f'save_folder={folder / "resumed"}']),
            ('resumed', ['max_duration=2ep', f'save_folder={folder / "resumed"}',
                         f'load_path={folder / "resumed" / "latest-rank0.pt"}'])]
    for name, overrides in runs:
        logs = folder / f'logs-{name}'
        logs.mkdir(exist_ok=True)
        fault_train([str(logs), '-1', '0', *COMMON, f'run_name={"whole" if name == "whole" else "resumed"}',
                     *overrides])
    dist.barrier()
    problems = []
    if dist.get_global_rank() == 0:
        try:
            problems = _problems(folder)
        except Exception as error:  # told to both ranks: the other would wait for rank 0 until its timeout
            problems = [f'{type(error).__name__}: {error}']
    assert dist.all_gather_object(problems)[0] == []  # both ranks fail alike, neither waits for the other
