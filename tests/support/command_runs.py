"""Running the ``composer-sampling`` command without the composer extra, and a run's ledgers to audit with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from composer_sampling.ledger_format import LedgerWriter

ROOT = Path(__file__).resolve().parents[2]

#: A fresh interpreter without the composer extra's modules, running the command with the arguments after ``-c``.
WITHOUT_COMPOSER = '''
import runpy, sys
for name in ('composer', 'omegaconf', 'tabulate', 'llmfoundry'):
    sys.modules[name] = None  # import name raises ModuleNotFoundError, as when it is not installed
sys.argv = ['composer-sampling', *sys.argv[1:]]
runpy.run_module('composer_sampling', run_name='__main__', alter_sys=True)
'''

FINGERPRINT = {'digest': '3f' * 16, 'source': 'TensorDataset of 8 samples: 8 samples hashed', 'covers_content': True}


def command(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``composer-sampling ARGS`` without the composer extra: its exit status, standard output and standard error."""
    return subprocess.run([sys.executable, '-c', WITHOUT_COMPOSER, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=environment())


def environment() -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH``, so that subprocesses import its package."""
    return {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))}


def write_resumed_run(folder: Path) -> Path:
    """A two-rank run on 8 samples (a global batch of 4, two batches an epoch), written as ``SampleLedger`` writes it:
    attempt ``a1`` trained batches 1 to 3 and crashed; ``b2`` resumed from its checkpoint at batch 2 and trained
    batches 3 to 5, so ``a1``'s batch 3 is superseded and epoch 2 is partial."""
    folder.mkdir(parents=True, exist_ok=True)
    orders = {0: [5, 2, 7, 0, 3, 6, 1, 4], 1: [1, 6, 0, 4, 7, 3, 2, 5], 2: [4, 0, 6, 2, 5, 1, 7, 3]}
    attempts = [('a1', None, 0, 1.0, [1, 2, 3]), ('b2', {'attempt': 'a1', 'batch': 2}, 2, 2.0, [3, 4, 5])]
    for attempt, resumed_from, start_batch, started, batches in attempts:
        for rank in range(2):
            header = dict(lineage='l1', attempt=attempt, resumed_from=resumed_from, started=started, rank=rank,
                          world_size=2, start_batch=start_batch, start_epoch=start_batch // 2, dataset_len=8,
                          padded=0, dropped=0, sub_epochs_per_epoch=1, run_name='digits-lightning',
                          source='sampler', data_fingerprint=FINGERPRINT)
            writer = LedgerWriter(folder / f'{attempt}-rank{rank}.bin', header)
            for batch in batches:
                epoch, step = divmod(batch - 1, 2)
                global_batch = orders[epoch][4 * step:4 * step + 4]
                writer.append(epoch, batch, global_batch[rank::2])  # rank r takes positions r, r + 2
            writer.close()
    return folder


#: What ``audit`` prints for :func:`write_resumed_run`'s folder: the output of the code of d6c0c28, which printed its
#: tables with tabulate, kept byte for byte.
RESUMED_RUN_AUDIT = '''\
| attempt   | run_name         |   world_size | resumed_from   |   start_batch |   last_batch | counted     |
|-----------|------------------|--------------|----------------|---------------|--------------|-------------|
| a1        | digits-lightning |            2 | -              |             0 |            3 | batches 1-2 |
| b2        | digits-lightning |            2 | a1 at batch 2  |             2 |            5 | batches 3-5 |

lineage counted: l1 (the only lineage in the folder)
attempts counted, from the fresh start: a1 -> b2
data fingerprint: 3f3f3f3f3f3f3f3f, from the TensorDataset of 8 samples: 8 samples hashed
4 samples trained after the checkpoint a resume started from were superseded (lost with a crash or left behind by \
the resume, which trained those batches again)

|   epoch |   trained |   exactly once |   repeated |   missing | status                         |
|---------|-----------|----------------|------------|-----------|--------------------------------|
|       0 |         8 |              8 |          0 |         0 | ok                             |
|       1 |         8 |              8 |          0 |         0 | ok                             |
|       2 |         4 |              4 |          0 |         4 | partial (run ended at batch 5) |

dataset length 8
'''
