"""A rank dies by SIGKILL mid-epoch; the run resumes from its last checkpoint on 2 ranks and on 1.

Per-rank ledgers (tests/support/fault_train.py) prove that in each resumed lineage every
epoch trains every sample exactly once, and that after the resume no sample
already trained in the interrupted epoch is loaded again.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from composer_sampling.ledger_format import read_ledger
from composer_sampling.recipes.cli import main as cli_main
from composer_sampling.recipes.schema import load_recipe
from composer_sampling.train import main as train_main
from composer_sampling.train import train

from support.fault_train import main as fault_train
from support.launcher import ROOT, launch

COMPOSER_SAMPLING = str(Path(sys.executable).parent / 'composer-sampling')

pytestmark = pytest.mark.launcher

DIGITS = 'yamls/digits.yaml'

DIGITS_TRAIN = 1438  # digits.yaml's train split
KILL_AT = 30  # global batches: 23 per epoch at global batch 64, so epoch 1, 7 batches in
EVERY = 4  # checkpoint interval in batches: the last checkpoint before the kill is batch 28


def _records(folder: Path, kind: str, run: str) -> list[dict]:
    lines = []
    for path in sorted(folder.glob(f'{kind}-{run}-rank*.jsonl')):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def test_sigkill_then_resume_on_two_ranks_and_on_one(tmp_path: Path) -> None:
    ledger, checkpoints = tmp_path / 'ledger', tmp_path / 'checkpoints'
    ledger.mkdir()
    common = ['yamls/digits.yaml', 'max_duration=2ep', 'eval_interval=2ep']
    killed, output = launch(
        ['-n', '2', 'tests/support/fault_train.py', str(ledger), '1', str(KILL_AT), *common, 'run_name=first',
         f'save_folder={checkpoints}', f'save_interval={EVERY}ba',
         f'callbacks.sample_ledger.folder={tmp_path / "samples2"}'], tmp_path / 'first')
    shutil.copytree(tmp_path / 'samples2', tmp_path / 'samples1')  # one lineage resumes on 2 ranks, one on 1
    assert killed.returncode != 0, output
    saved = {int(re.search(r'-ba(\d+)-', path.name).group(1)): path for path in checkpoints.glob('ep*-ba*-rank0.pt')}
    latest = max(saved)
    assert latest == KILL_AT // EVERY * EVERY, sorted(saved)
    first = [r for r in _records(ledger, 'trained', 'first') if r['batch'] <= latest]
    trained_before = {r['epoch'] for r in first}
    assert trained_before == {0, 1}, 'the checkpoint must fall in the middle of epoch 1'

    for ranks in (2, 1):
        run = f'resumed{ranks}'
        resume = [str(ledger), '-1', '0', *common, f'run_name={run}', f'load_path={saved[latest]}',
                  f'callbacks.sample_ledger.folder={tmp_path / f"samples{ranks}"}']
        if ranks == 1:  # one rank needs no launcher: in this process, which a failed run fails
            fault_train(resume)
        else:
            result, output = launch(['-n', '2', 'tests/support/fault_train.py', *resume], tmp_path / run)
            assert result.returncode == 0, output
        resumed = _records(ledger, 'trained', run)
        assert resumed and min(r['batch'] for r in resumed) == latest + 1
        for epoch in (0, 1):
            counts = collections.Counter(
                index for r in first + resumed if r['epoch'] == epoch for index in r['indices'])
            assert sorted(counts) == list(range(DIGITS_TRAIN)), f'{run}: epoch {epoch} misses samples'
            assert set(counts.values()) == {1}, f'{run}: epoch {epoch} repeats samples'
        already = {index for r in first if r['epoch'] == 1 for index in r['indices']}
        reads = collections.Counter(r['read'] for r in _records(ledger, 'reads', run))
        assert not already & set(reads), f'{run}: loaded {len(already & set(reads))} trained samples again'
        assert sum(reads.values()) == sum(len(r['indices']) for r in resumed)

        # The package's own ledger and audit reach the same verdict from their side.
        audit = subprocess.run([COMPOSER_SAMPLING, 'audit', str(tmp_path / f'samples{ranks}')], capture_output=True,
                               text=True, timeout=120)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        rows = re.findall(r'^\|\s+(\d)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\| (\w+)',
                          audit.stdout, re.M)
        assert rows == [(str(epoch), str(DIGITS_TRAIN), str(DIGITS_TRAIN), '0', '0', 'ok') for epoch in (0, 1)]
        # The interrupted attempt's ledger holds every batch up to the checkpoint on both ranks. Past it, it
        # holds what a rank wrote before it ended: the rank killed by SIGKILL held those records in memory,
        # the other may have written them when the launcher stopped it; the audit supersedes exactly those.
        lost = sum(len(r['indices']) for r in _records(ledger, 'trained', 'first') if r['batch'] > latest)
        beyond = 0
        for path in (tmp_path / f'samples{ranks}').glob('*.bin'):
            read = read_ledger(path)
            if read.header['start_batch'] == 0:
                batches = [record.batch for record in read.trained]
                assert batches[:latest] == list(range(1, latest + 1)), f'rank {read.header["rank"]}: {batches}'
                assert read.header['rank'] != 1 or batches == list(range(1, latest + 1)), 'rank 1 was SIGKILLed'
                beyond += sum(record.indices.size for record in read.trained if record.batch > latest)
        assert beyond <= lost and (f'{beyond} samples trained after the checkpoint' in audit.stdout or beyond == 0)


def test_a_run_killed_while_saving_resumes_from_latest_into_its_own_folder(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL between Composer's open() of ep0-ba2 and its first byte; `train ... load_path=latest` just works.

    The file cut short is moved aside (never deleted), the resumed run ends with the
    weights and optimizer state of the run that never stopped, and its ledger audits.
    """
    common = [DIGITS, 'train_loader.dataset={name: synthetic, size: 400}', 'max_duration=4ba', 'save_interval=1ba',
              'run_name=synthetic', 'callbacks.sample_ledger={}']
    whole = train(load_recipe(DIGITS, [*common[1:], f'save_folder={tmp_path / "whole"}']))
    assert whole.trainer.state.timestamp.batch.value == 4
    folder = tmp_path / 'crashed'
    killed = subprocess.run([sys.executable, 'tests/support/fault_train.py', str(tmp_path), '0', '2-save', *common,
                             f'save_folder={folder}'], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    partial = folder / 'ep0-ba2-rank0.pt'
    assert partial.stat().st_size == 0 and os.readlink(folder / 'latest-rank0.pt') == 'ep0-ba1-rank0.pt'
    capsys.readouterr()

    assert train_main([*common, f'save_folder={folder}', f'load_path={folder}/latest-rank{{rank}}.pt']) == 0
    out = capsys.readouterr().out
    assert (f'save_folder {folder}: moved ep0-ba2-rank0.pt (0 bytes) to {folder / "interrupted-1"}: cut short after '
            'ep0-ba1-rank0.pt, the latest checkpoint, which this run resumes') in out
    assert (folder / 'interrupted-1' / 'ep0-ba2-rank0.pt').stat().st_size == 0, 'kept, not deleted'
    assert os.readlink(folder / 'latest-rank0.pt') == 'ep0-ba4-rank0.pt'
    resumed = torch.load(folder / 'ep0-ba4-rank0.pt', weights_only=False)['state']
    never_stopped = torch.load(tmp_path / 'whole' / 'ep0-ba4-rank0.pt', weights_only=False)['state']
    torch.testing.assert_close(resumed['model'], never_stopped['model'], rtol=0, atol=0)  # bit for bit
    optimizer, uninterrupted = resumed['optimizers']['AdamW'], never_stopped['optimizers']['AdamW']
    torch.testing.assert_close(optimizer['state'], uninterrupted['state'], rtol=0, atol=0)
    assert optimizer['param_groups'] == uninterrupted['param_groups']
    assert cli_main(['audit', str(folder)]) == 0
    out = capsys.readouterr().out
    assert '64 samples trained after the checkpoint a resume started from were superseded' in out, out
