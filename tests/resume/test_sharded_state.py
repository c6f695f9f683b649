"""SamplerSync's state through torch.distributed.checkpoint, as Composer saves and loads a sharded checkpoint.

Composer writes a sharded checkpoint (FSDP, ``state_dict_type: sharded``) with
``dist_cp.save`` and reads it into a template, the state of a Trainer that has not
fitted yet, with torch's strict ``DefaultLoadPlanner``: every entry of the template
must be in the checkpoint. FSDP needs GPUs, so here the SamplerSync state of a real
single-file checkpoint goes through ``dist_cp.save`` and ``dist_cp.load`` (in one
process, no process group) the way Composer's sharded path sends it, is put back, and the
run resumes from it: bit for bit the run that never stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dist_cp
from composer import Trainer
from torch.distributed.checkpoint.api import CheckpointException

from composer_sampling import SamplerSync

from support.resume_harness import LOADERS, CountedData, DropoutMLP

pytestmark = pytest.mark.composer


def _trainer(folder: Path, **kwargs: Any) -> tuple[Trainer, DropoutMLP]:
    """Dropout and augmentations over torch's DistributedSampler on one rank, 2 epochs of 10 batches."""
    model = DropoutMLP(dropout=0.5)
    loader = LOADERS['torch_distributed'](CountedData(40, augment=True), 1, 0, 0)
    trainer = Trainer(model=model, train_dataloader=loader,
                      optimizers=torch.optim.Adam(model.parameters(), lr=0.01), max_duration='2ep',
                      device_train_microbatch_size=4, callbacks=[SamplerSync()], seed=17, device='cpu',
                      progress_bar=False, log_to_console=False, load_progress_bar=False, **kwargs)
    return trainer, model


def _through_sharded(sync_state: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``sync_state`` saved as Composer's sharded path saves it, loaded into a new SamplerSync's template."""
    dist_cp.save({'state': {'callbacks': {'SamplerSync': sync_state}}}, checkpoint_id=folder,
                 planner=dist_cp.DefaultSavePlanner(dedup_save_to_lowest_rank=True))
    template = {'state': {'callbacks': {'SamplerSync': SamplerSync().state_dict()}}}
    dist_cp.load(template, checkpoint_id=folder)  # torch's strict DefaultLoadPlanner, one process
    return template['state']['callbacks']['SamplerSync']


def test_a_state_through_a_sharded_checkpoint_resumes_bit_for_bit(tmp_path: Path) -> None:
    whole, expected = _trainer(tmp_path, save_folder=str(tmp_path), save_interval='3ba')
    whole.fit()
    checkpoint = torch.load(tmp_path / 'ep0-ba3-rank0.pt', weights_only=False)
    saved = checkpoint['state']['callbacks']['SamplerSync']
    assert saved['rng'] and saved['order_signatures'], 'the checkpoint holds the RNG copy and the order check'
    loaded = _through_sharded(saved, tmp_path / 'sharded')
    assert {key: value for key, value in loaded.items() if key != 'rng'} == \
        {key: value for key, value in saved.items() if key != 'rng'}
    assert isinstance(loaded['rng'], tuple) and len(loaded['rng']) == len(saved['rng'])  # the run tells the rest
    checkpoint['state']['callbacks']['SamplerSync'] = loaded
    torch.save(checkpoint, tmp_path / 'through-sharded.pt')
    resumed, model = _trainer(tmp_path / 'resumed', load_path=str(tmp_path / 'through-sharded.pt'))
    resumed.fit()
    assert all(torch.equal(a, b) for a, b in zip(expected.state_dict().values(), model.state_dict().values(),
                                                 strict=True))
    optimizer, reference = resumed.state.optimizers[0].state_dict(), whole.state.optimizers[0].state_dict()
    assert all(torch.equal(reference['state'][key][name], value[name])
               for key, value in optimizer['state'].items() for name in value)


def test_version_3_lists_could_not_be_loaded_from_a_sharded_checkpoint(tmp_path: Path) -> None:
    """Why version 4 writes tuples: a list of mappings, or a mapping, is split into entries the template lacks."""
    state = SamplerSync().state_dict()
    version_3 = {**state, 'version': 3, 'order_signatures': [{'sampler': 'DistributedSampler', 'dataset_len': 40}],
                 'epoch_seeds': {'epoch': 0, 'samplers': [5]}}
    missing = r'Missing key in checkpoint state_dict: state\.callbacks\.SamplerSync\.'
    with pytest.raises(CheckpointException, match=missing):
        _through_sharded(version_3, tmp_path / 'v3')
    version_4 = {**state, 'order_signatures': ({'sampler': 'DistributedSampler', 'dataset_len': 40},),
                 'epoch_seeds': (('epoch', 0), ('samplers', [5]))}
    assert _through_sharded(version_4, tmp_path / 'v4') == version_4
