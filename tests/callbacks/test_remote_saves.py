"""A fit that would train again what its save folder in an object store holds is refused at fit start, on any entry
point: a plain Composer ``Trainer`` with ``autoresume=True`` here, against a real S3 server (SeaweedFS).

Composer's autoresume takes a local copy of ``latest-rank0.pt`` (``./s3:/BUCKET/run/``,
downloaded the last time the run resumed) before the bucket's latest, and starts from
batch 0 when the bucket holds checkpoints but no latest pointer. Either way the fit
would train batches the bucket holds and fail at its first upload; ``SamplerSync``
refuses it before the first batch, naming the stale copy or the missing pointer.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import boto3
import pytest
from composer.callbacks import CheckpointSaver
from composer.core import Callback, State
from composer.loggers import Logger
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.callbacks.sampler_sync import DataOrderError

from support.helpers import make_trainer, synthetic

pytestmark = pytest.mark.s3


class QuickPointer(Callback):
    """Composer checks a remote checkpoint's upload every 30 s before it uploads the latest pointer: 0.2 s here."""

    def fit_start(self, state: State, logger: Logger) -> None:
        for callback in state.callbacks:
            if isinstance(callback, CheckpointSaver):
                callback._symlink_upload_wait_before_next_try_in_seconds = 0.2


def _fit(run: str, duration: str) -> None:
    """One start of the same command: autoresume into ``run``, a checkpoint every batch, to ``duration``."""
    dataset = synthetic(64)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    trainer = make_trainer(loader, max_duration=duration, save_folder=run, save_interval='1ba', run_name='run',
                           autoresume=True, callbacks=[QuickPointer(), SamplerSync()])
    try:
        trainer.fit()
    finally:
        trainer.close()


def _client() -> Any:
    return boto3.client('s3', endpoint_url=os.environ['S3_ENDPOINT_URL'])  # the s3_bucket fixture's server


def _keys(run: str) -> list[str]:
    bucket = run.removeprefix('s3://').split('/', 1)[0]
    return sorted(item['Key'] for item in _client().list_objects_v2(Bucket=bucket).get('Contents', []))


def test_a_stale_local_copy_and_checkpoints_without_a_pointer_are_refused(s3_bucket: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Four starts of one command (each start of Composer's uploader costs seconds, so one bucket serves both cases):
    the third takes the stale local copy and is refused; with the copy gone and the bucket's pointer lost, the fourth
    would start from batch 0 and is refused too. Nothing is trained or uploaded by a refused start."""
    monkeypatch.chdir(tmp_path)  # Composer downloads the latest into the working folder, under s3:/
    run = f'{s3_bucket}/run'
    _fit(run, '2ba')
    _fit(run, '4ba')  # resumes from the bucket's latest (batch 2), through a local copy it leaves behind
    local = tmp_path / run.replace('s3://', 's3:/') / 'latest-rank0.pt'
    assert local.exists()
    uploaded = _keys(run)
    with pytest.raises(DataOrderError) as refused:
        _fit(run, '6ba')  # Composer takes the local copy (batch 2) before the bucket's latest (batch 4)
    message = str(refused.value)
    assert message.startswith(f'SamplerSync: this fit resumes at batch 2, from {local}, a copy Composer downloaded '
                              'when the run last resumed'), message
    assert 'holds later checkpoints (ep0-ba3-rank0.pt, ep0-ba4-rank0.pt; its latest is ep0-ba4-rank0.pt)' in message
    assert f'Delete {local.parent} (the stale copy) and start again' in message
    assert _keys(run) == uploaded, 'nothing was trained or uploaded'

    shutil.rmtree(local.parent)
    _client().delete_object(Bucket=s3_bucket.removeprefix('s3://'), Key='run/latest-rank0.pt.symlink')
    with pytest.raises(DataOrderError) as refused:
        _fit(run, '6ba')  # autoresume finds neither a local copy nor a pointer, and starts from batch 0
    message = str(refused.value)
    assert message.startswith(f'SamplerSync: the save folder {run} holds checkpoints (ep0-ba1-rank0.pt, '
                              'ep0-ba2-rank0.pt, ep0-ba3-rank0.pt, ...) but no latest-rank0.pt.symlink pointer to the '
                              'latest'), message
    assert f'Resume with load_path={run}/ep0-ba4-rank0.pt' in message
    assert _keys(run) == [key for key in uploaded if key != 'run/latest-rank0.pt.symlink']
