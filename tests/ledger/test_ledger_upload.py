"""The ledger beside remote checkpoints: staged locally, uploaded before every checkpoint and at fit end.

Without a server: when the schedule uploads (a simulation of Composer's event order)
and how big the staged file is. With the SeaweedFS server of ``s3_bucket``: a recipe
run on two ranks into a bucket, killed after a checkpoint, has uploaded every batch of
it; resumed from the bucket, its uploaded ledger audits as the local run's that never
stopped, and it ends with that run's weights.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from composer_sampling.audit import audit_folder
from composer_sampling.callbacks._ledger_upload import UploadSchedule, ledger_bytes
from composer_sampling.ledger_format import LedgerWriter, index_bytes, read_ledger

from support.helpers import states_equal
from support.launched_runs import SYNTHETIC_RECIPE, two_rank_synthetic
from support.launcher import COMPOSER

ROOT = Path(__file__).resolve().parents[2]
#: 320 training samples (of 400) at global batch 64: 5 batches per epoch; checkpoints at batches 3 and 5 (the end).
COMMON = SYNTHETIC_RECIPE


# when the schedule uploads --------------------------------------------------------------------------

@given(batches=st.integers(1, 40), per_epoch=st.integers(1, 9), every=st.integers(1, 12),
       ledger_first=st.booleans(), honest=st.booleans())
def test_every_checkpoint_is_covered_by_an_upload_before_it_can_be_resumed(batches: int, per_epoch: int, every: int,
                                                                           ledger_first: bool, honest: bool) -> None:
    """Composer's order: BATCH_START, BATCH_END (recorded), BATCH_CHECKPOINT, at an epoch's end EPOCH_CHECKPOINT.

    The saver saves at every ``every`` batches (batch checkpoints) and at each epoch's end; the
    ledger, before the saver among the callbacks, asks whether it is about to save (``honest``:
    the answer is right; else always no), or comes after it. A checkpoint's batches are uploaded
    before its file is written when the ledger comes first and is told, else before the next
    batch ends (when Composer may upload the link that makes it visible to autoresume), and at most
    one upload follows each checkpoint besides the last.
    """
    schedule, saved, uploads = UploadSchedule(covered=None), None, []
    covered_at_save: dict[int, int] = {}
    recorded = 0

    def ledger(batch: int, saving: bool) -> None:
        covered = schedule.due(saved, batch, saving)
        if covered is not None:
            uploads.append(recorded)
            schedule.covered = covered

    def checkpoint_event(batch: int, will_save: bool) -> None:
        nonlocal saved
        about = will_save and saved != batch
        if ledger_first:
            ledger(batch, saving=about if honest else False)
        if about:
            saved = batch
            covered_at_save[batch] = max(uploads, default=0)
        if not ledger_first:
            ledger(batch, saving=False)

    for batch in range(1, batches + 1):
        ledger(batch, saving=False)  # BATCH_START
        if batch - 1 in covered_at_save:
            assert max(uploads) >= batch - 1, 'the checkpoint was not uploaded before the next batch'
        recorded = batch  # BATCH_END
        checkpoint_event(batch, batch % every == 0)
        if batch % per_epoch == 0:
            checkpoint_event(batch, True)
    ledger(batches + 1, saving=False)  # FIT_END uploads whatever it holds
    uploads.append(recorded)
    for batch in covered_at_save:
        assert max(uploads) >= batch
        if ledger_first and honest:
            assert covered_at_save[batch] >= batch, f'checkpoint {batch} saved before its batches were uploaded'
    assert len(uploads) <= 2 * len(covered_at_save) + 1
    if honest or not ledger_first:
        assert len(uploads) <= len(covered_at_save) + 1


@given(samples=st.lists(st.integers(0, 70), max_size=30), dataset_len=st.sampled_from([100, 2**32 + 5]))
def test_the_staged_files_size_is_the_documented_formula(tmp_path_factory: pytest.TempPathFactory,
                                                          samples: list[int], dataset_len: int) -> None:
    path = tmp_path_factory.mktemp('ledger') / 'a-rank0.bin'
    writer = LedgerWriter(path, {'rank': 0, 'dataset_len': dataset_len})
    for batch, count in enumerate(samples, start=1):
        writer.append(0, batch, list(range(min(count, 100))))
    writer.close()
    data = path.read_bytes()
    header_text = int.from_bytes(data[8:12], 'little')  # the JSON header's length, after the 8-byte magic
    assert len(data) == ledger_bytes(header_text, [min(n, 100) for n in samples], index_bytes(dataset_len))


# through a real Trainer against the S3 server -------------------------------------------------------

def _download(prefix: str, into: Path) -> list[str]:
    """Every object under ``prefix`` (``s3://bucket/run/ledger``), downloaded with Composer's object store."""
    from composer.utils import maybe_create_object_store_from_uri, parse_uri

    store = maybe_create_object_store_from_uri(prefix)
    assert store is not None
    path = parse_uri(prefix)[2]
    names = sorted(store.list_objects(f'{path}/'))
    for name in names:
        store.download_object(name, str(into / name[len(path) + 1:]))
    return [name[len(path) + 1:] for name in names]


def _killed_run(command: list[str], log: Path) -> tuple[int, str]:
    """Run ``command``, which kills itself, and then the processes it left (Composer's upload processes).

    It runs in a session of its own: Composer's spawned uploaders outlive a SIGKILL of the
    process that started them, and would hold its output open and linger.
    """
    with log.open('w') as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = process.wait(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return returncode, log.read_text()[-3000:]


def _records(folder: Path, rank: str) -> list[tuple[int, int, list[int]]]:
    return [(record.epoch, record.batch, record.indices.tolist())
            for path in sorted(folder.glob(f'*-{rank}.bin')) for record in read_ledger(path).trained]


@pytest.mark.s3
@pytest.mark.launcher
def test_two_ranks_killed_after_a_checkpoint_autoresume_from_the_bucket_and_audit_exactly_once(
        s3_bucket: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One command, ``save_folder: s3://BUCKET/run`` with ``autoresume: true``, launched twice on two ranks. Rank 0,
    which writes the checkpoint and its pointer, is killed mid-epoch and the launcher ends the other. The bucket then
    holds every batch of the last checkpoint in each rank's ledger, and not the batch after it. The same command
    resumes both ranks from the bucket; the run trains every sample once, leaves no staging folder, and ends with the
    weights and optimizer state of a two-rank run that never stopped (launched once for this test and
    tests/neighbours/test_launcher.py's, COMMON into a local folder)."""
    def launched(name: str) -> list[str]:
        return [COMPOSER, '-n', '2', '--stdout', str(tmp_path / f'{name}-rank{{rank}}.out')]

    never_stopped = two_rank_synthetic(tmp_path_factory)
    assert never_stopped.result.returncode == 0, never_stopped.output
    whole = never_stopped.save_folder
    run = f'{s3_bucket}/run'
    command = [*COMMON, f'save_folder={run}', 'autoresume=true']
    killer = ['tests/support/fault_train.py', str(tmp_path), '0', '4']
    returncode, output = _killed_run([*launched('killed'), *killer, *command], tmp_path / 'killed.log')
    assert returncode != 0, output
    objects = _download(run, tmp_path / 'killed')
    assert 'ep0-ba3-rank0.pt' in objects and 'ep1-ba5-rank0.pt' not in objects, objects
    killed_ledgers = sorted(name for name in objects if name.startswith('ledger/'))
    killed_attempt = killed_ledgers[0].removeprefix('ledger/').rsplit('-rank', 1)[0]
    assert killed_ledgers == [f'ledger/{killed_attempt}-rank{rank}.bin' for rank in (0, 1)], killed_ledgers
    # Uploaded before the checkpoint of batch 3 was written: every batch it holds, not batch 4.
    assert [batch for _, batch, _ in _records(tmp_path / 'killed' / 'ledger', 'rank0')] == [1, 2, 3]
    (staged,) = Path(tempfile.gettempdir()).glob(f'composer-sampling-ledger-*-{killed_attempt}')
    assert [batch for _, batch, _ in _records(staged, 'rank0')] == [1, 2, 3]  # batch 4 was held in memory
    shutil.rmtree(staged)

    returncode, output = _killed_run([*launched('resumed'), '-m', 'composer_sampling.train', *command],
                                     tmp_path / 'resumed.log')
    assert returncode == 0 and f'autoresume          resumes from {run}/ep0-ba3-rank0.pt' in output, output
    names = _download(run, tmp_path / 'uploaded')
    (attempt,) = {name.removeprefix('ledger/').rsplit('-rank', 1)[0] for name in names
                  if name.startswith('ledger/') and name not in killed_ledgers}
    assert not list(Path(tempfile.gettempdir()).glob(f'composer-sampling-ledger-*-{attempt}')), 'staging left behind'
    report = audit_folder(tmp_path / 'uploaded')
    assert [(epoch.exactly_once, epoch.status) for epoch in report.epochs] == [(320, 'ok')]
    assert report.epochs == audit_folder(whole).epochs
    assert audit_folder(run).epochs == report.epochs  # audit of the bucket itself
    final = torch.load(tmp_path / 'uploaded' / 'ep1-ba5-rank0.pt', weights_only=False)['state']
    never = torch.load(whole / 'ep1-ba5-rank0.pt', weights_only=False)['state']
    for key in ('model', 'optimizers'):
        assert states_equal(final[key], never[key]), key


_FAILING_RUN = '''
import sys
from composer import Callback
from torch.utils.data import DataLoader
from composer_sampling import ResumableDistributedSampler, SampleLedger
from support.helpers import make_trainer, synthetic


class FailsAtBatch3(Callback):
    def batch_end(self, state, logger):
        if int(state.timestamp.batch) == 3:
            raise RuntimeError('the run fails at batch 3')


dataset = synthetic(64)
loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
trainer = make_trainer(loader, run_name=sys.argv[2], callbacks=[SampleLedger(sys.argv[1]), FailsAtBatch3()])
try:
    trainer.fit()
except RuntimeError:
    print('staged:', *sorted(path.name for path in trainer.state.callbacks[0]._recorder.path.parent.iterdir()))
    if sys.argv[3] == 'close':
        trainer.close()
        print('closed')
    raise
'''


@pytest.mark.s3
@pytest.mark.parametrize('ending', ['close', 'exit'])
def test_a_run_that_ends_with_an_exception_leaves_no_staging_folder(ending: str, s3_bucket: str,
                                                                    tmp_path: Path) -> None:
    """The fit raises at batch 3; then the trainer is closed (``close``), or the exception ends the process
    (``exit``, where Composer closes the trainer at exit). Either way the staging folder is gone."""
    run_name = f'fails-{ending}-{os.getpid()}'
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(ROOT), str(ROOT / 'tests')])}
    done = subprocess.run([sys.executable, '-c', _FAILING_RUN, f'{s3_bucket}/run/ledger', run_name, ending],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 1 and 'RuntimeError: the run fails at batch 3' in done.stderr, done.stderr
    assert 'staged: ' in done.stdout and '-rank0.bin' in done.stdout, done.stdout  # it was staged while it ran
    assert ('closed' in done.stdout) == (ending == 'close')
    assert not list(Path(tempfile.gettempdir()).glob(f'composer-sampling-ledger-{run_name}-*')), 'staging left behind'
