"""A sharded checkpoint cannot run code: its ``.metadata`` and every non-tensor entry are read weights-only first.

Composer's FSDP2 (``parallelism_config.fsdp`` under ``FSDP_VERSION=2``) trains on the CPU
and writes ``torch.distributed.checkpoint`` folders. torch reads their ``.metadata``
with ``pickle.load`` and every non-tensor entry with ``torch.load(weights_only=False)``,
on every rank; the recipe runner reads them first, safely, and refuses what would run
code. The checkpoints here are real: written by a one-rank FSDP2 run of the digits
recipe, then edited with ``dist_cp`` itself.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dist_cp
from composer.core import Callback, State
from composer.loggers import Logger
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from composer_sampling import CheckpointError
from composer_sampling._checkpoint.sharded import load_checked_sharded, read_metadata
from composer_sampling.recipes.checks import checked_spec
from composer_sampling.recipes.cli import main as cli_main
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.runner import train
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import main as train_main

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')
#: The digits recipe on 400 synthetic samples (5 batches per epoch), FSDP2 with sharded checkpoints.
SHARDED = [DIGITS, 'train_loader.dataset={name: synthetic, size: 400}', 'device=cpu', 'run_name=sharded',
           'parallelism_config={fsdp: {state_dict_type: sharded}}']
#: Where the crafted entries go: keys a resuming Trainer's template holds, so Composer reads them.
CRAFTED_KEY = ('state', 'callbacks', 'SamplerSync', 'data_seed')


class WritesMarker:
    """Unpickling this calls ``exec``, which writes ``marker`` and returns None: the payload of a crafted entry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return exec, (f'open({str(self.marker)!r}, "w").write("ran")',)


class _Placeholder:
    """Pickles as a call of ``print``, which :func:`_naming_a_module` renames in the pickle's bytes."""

    def __reduce__(self) -> tuple:
        return print, ('placeholder',)


def _naming_a_module(tmp_path: Path, metadata: Any) -> tuple[bytes, str, Path]:
    """``metadata`` pickled with a global of a new module in ``tmp_path`` whose import writes a marker file.

    Protocol 2 writes a global as the text ``c<module>\\n<name>\\n`` (no length before it), so the placeholder's
    ``print`` is renamed in place. Returns the bytes, the module's name and the marker.
    """
    module, marker = f'crafted_{tmp_path.name}', tmp_path / 'IMPORTED'
    (tmp_path / f'{module}.py').write_text(f'open({str(marker)!r}, "w").write("ran")\nanything = print\n')
    metadata.planner_data['crafted'] = _Placeholder()
    data = pickle.dumps(metadata, protocol=2)
    assert data.count(b'c__builtin__\nprint\n') == 1
    return data.replace(b'c__builtin__\nprint\n', f'c{module}\nanything\n'.encode()), module, marker


class FitStart(Callback):
    """Records the batch a fit starts from."""

    batch: int | None = None

    def fit_start(self, state: State, logger: Logger) -> None:
        self.batch = int(state.timestamp.batch)


def _leave_no_process_group() -> None:
    """Composer starts a process group of one for FSDP2 and leaves it: a later test of this worker would find
    torch.distributed initialised (Composer's dist then refuses a WORLD_SIZE of 2), so it goes with the test."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.fixture(autouse=True)
def _one_process_group_a_test() -> Iterator[None]:
    yield
    _leave_no_process_group()


@pytest.fixture()
def fsdp2(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FSDP_VERSION=2``: Composer builds FSDP2 from the recipe's ``parallelism_config.fsdp``."""
    monkeypatch.setenv('FSDP_VERSION', '2')


@pytest.fixture(scope='module')
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The save folder of a one-rank FSDP2 run that stopped at batch 3 with a sharded checkpoint (``ep0-ba3``)."""
    folder = tmp_path_factory.mktemp('sharded') / 'run'
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('FSDP_VERSION', '2')
        train(load_recipe(SHARDED[0], [*SHARDED[1:], 'max_duration=3ba', 'save_interval=3ba',
                                       f'save_folder={folder}']))
    _leave_no_process_group()
    assert (folder / 'ep0-ba3' / '.metadata').is_file() and (folder / 'latest-rank0.pt').is_symlink()
    return folder


def _whole(folder: Path, scratch: Path) -> dict[str, Any]:
    """The checkpoint ``folder`` read whole into one dict, as torch's ``dcp_to_torch_save`` reads it (our own)."""
    dcp_to_torch_save(folder, scratch / 'whole.pt')
    return torch.load(scratch / 'whole.pt', weights_only=False)


def _edited(written: Path, tmp_path: Path, path: tuple[str, ...], value: Any) -> Path:
    """The checkpoint at batch 3 with the entry at ``path`` replaced by ``value``, saved again by ``dist_cp``."""
    state = _whole(written / 'ep0-ba3', tmp_path)
    node = state
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    folder = tmp_path / 'edited' / 'ep0-ba3'
    dist_cp.save(state, checkpoint_id=folder, no_dist=True)
    return folder


def _crafted_metadata(written: Path, tmp_path: Path) -> tuple[Path, str, Path]:
    """The checkpoint at batch 3 copied, its ``.metadata`` naming a new module (:func:`_naming_a_module`): the
    folder, the module's name and the marker its import writes."""
    folder = tmp_path / 'crafted-metadata' / 'ep0-ba3'
    folder.mkdir(parents=True)
    for file in (written / 'ep0-ba3').iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    data, module, marker = _naming_a_module(tmp_path, read_metadata(folder))
    (folder / '.metadata').write_bytes(data)
    return folder, module, marker


@pytest.fixture()
def importable(tmp_path: Path) -> Iterator[None]:
    """``tmp_path`` on ``sys.path``, where the crafted metadata's module lies, for this test only."""
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))


def test_the_payloads_are_real(written: Path, tmp_path: Path, importable: None) -> None:
    """What Composer's own load does: ``dist_cp`` runs a crafted entry's code, and imports the module a crafted
    ``.metadata`` names."""
    marker = tmp_path / 'MARKER'
    folder = _edited(written, tmp_path, CRAFTED_KEY, WritesMarker(marker))
    template = {'state': {'callbacks': {'SamplerSync': {'data_seed': None}}}}
    dist_cp.load(template, checkpoint_id=folder, no_dist=True)  # DefaultLoadPlanner.load_bytes: weights_only=False
    assert marker.read_text() == 'ran'
    crafted, module, imported = _crafted_metadata(written, tmp_path)
    dist_cp.FileSystemReader(crafted).read_metadata()  # pickle.load
    assert imported.read_text() == 'ran'
    del sys.modules[module]


def test_a_checkpoint_fsdp2_wrote_passes_and_resumes_without_trust(written: Path, fsdp2: None) -> None:
    """The folder behind ``latest-rank0.pt`` is checked (its model's shapes and SamplerSync's state read) and
    handed to Composer as the folder itself, which resumes from it at batch 3."""
    loaded = load_checked_sharded(written / 'latest-rank0.pt')
    assert loaded['state']['model']['net.0.weight'].shape == (64, 64)
    assert loaded['state']['model']['net.0.weight'].device == torch.device('meta')  # no tensor is read
    assert loaded['state']['callbacks']['SamplerSync']['data_seed'] == 17
    assert loaded['state']['timestamp']['Timestamp']['batch'] == 3  # a mapping of numbers, read weights-only
    recipe = load_recipe(SHARDED[0], [*SHARDED[1:], 'max_duration=4ba', f'load_path={written}/latest-rank0.pt',
                                      f'save_folder={written.parent / "resumed"}'])
    start = FitStart()
    result = train(recipe, callbacks=[start])
    assert start.batch == 3  # Composer loaded the folder it was given
    checked = result.run.checked_checkpoints['load_path']
    assert checked.path == checked.load_path == os.path.realpath(written / 'ep0-ba3')  # the folder, not the link
    assert checked.model_shapes['net.2.weight'] == (10, 64) and checked.data_seed == 17
    assert result.trainer.state.timestamp.batch.value == 4


def test_a_crafted_entry_is_refused_naming_the_file_and_the_entry(written: Path, tmp_path: Path, fsdp2: None,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / 'MARKER'
    folder = _edited(written, tmp_path, CRAFTED_KEY, WritesMarker(marker))
    with pytest.raises(CheckpointError, match=r'entry state\.callbacks\.SamplerSync\.data_seed .*needs builtins\.exec'):
        load_checked_sharded(folder)
    for command in ('train', 'plan'):
        assert cli_main([command, *SHARDED, f'load_path={folder}']) == 2
        err = capsys.readouterr().err
        assert re.match(rf'error: load_path: {folder}/__0_0\.distcp, entry state\.callbacks\.SamplerSync\.data_seed '
                        r'\(bytes \d+ to \d+\), needs builtins\.exec, outside the types a Composer checkpoint needs',
                        err), err
        assert "add what it needs to checkpoint_safe_globals ('module:Name') or set trust_checkpoint: true" in err
    assert not marker.exists()
    with contextlib.suppress(Exception):  # trusted, it goes to Composer, which unpickles it
        train_main([*SHARDED, f'load_path={folder}', 'trust_checkpoint=true', 'max_duration=4ba',
                    f'save_folder={tmp_path / "trusted"}'])
    assert marker.read_text() == 'ran'


def test_a_crafted_metadata_file_is_refused_before_any_entry_is_read(written: Path, tmp_path: Path, fsdp2: None,
                                                                     importable: None, capsys) -> None:
    """A ``.metadata`` naming a module outside the allow-list: refused before the module is imported."""
    folder, module, marker = _crafted_metadata(written, tmp_path)
    assert train_main([*SHARDED, f'load_path={folder}']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: load_path: {folder}/.metadata needs {module}.anything, outside the types '
                          'torch.distributed.checkpoint metadata is made of'), err
    assert not marker.exists() and module not in sys.modules


def test_checkpoint_safe_globals_let_an_entry_of_another_type_load(written: Path, tmp_path: Path,
                                                                   fsdp2: None) -> None:
    folder = _edited(written, tmp_path, ('state', 'metadata', 'note'), frozenset({1}))
    refused = load_recipe(SHARDED[0], [*SHARDED[1:], f'load_path={folder}'])
    with pytest.raises(RecipeError, match=r'entry state\.metadata\.note .*needs builtins\.frozenset'):
        checked_spec(resolve(refused), world_size=1)
    allowed = load_recipe(SHARDED[0], [*SHARDED[1:], f'load_path={folder}',
                                       "checkpoint_safe_globals=['builtins:frozenset']"])
    checked = checked_spec(resolve(allowed), world_size=1).checkpoints['load_path']
    assert checked.path == os.path.realpath(folder)


@pytest.mark.parametrize('field', ['data_seed', 'replication'])
def test_a_samplersync_state_out_of_range_is_blamed_on_load_path(field: str, written: Path, tmp_path: Path,
                                                                 fsdp2: None, capsys) -> None:
    folder = _edited(written, tmp_path, ('state', 'callbacks', 'SamplerSync', field), -5)
    assert cli_main(['train', *SHARDED, f'load_path={folder}']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: load_path: the checkpoint {folder} holds a SamplerSync state that cannot be '
                          f'loaded (SamplerSync state {field} must be in the interval '), err


def test_a_model_of_another_shape_is_named_before_training(written: Path, fsdp2: None, capsys) -> None:
    assert train_main([*SHARDED, f'load_path={written}/latest-rank0.pt', 'model.hidden_size=32']) == 2
    err = capsys.readouterr().err
    folder = os.path.realpath(written / 'ep0-ba3')
    assert err.startswith(f'error: load_path: the checkpoint {folder} holds '
                          'net.0.weight of shape [64, 64], the model (mlp) has net.0.weight of shape [32, 64]'), err


def test_what_a_sharded_run_cannot_load_is_named(written: Path, tmp_path: Path, fsdp2: None, capsys) -> None:
    single = tmp_path / 'single.pt'
    single.write_bytes(b'PK\x03\x04')
    cases = {
        f'{written}/latest-rank{{rank}}.pt': 'does not exist (Composer does not fill {rank} in a sharded checkpoint',
        str(single): 'is a single file, but this run loads sharded checkpoints',
        's3://bucket/run/ep0-ba3': 'is a URI (s3://); Composer downloads a sharded checkpoint file by file',
        str(tmp_path): f'{tmp_path} holds no .metadata file: it is not a sharded checkpoint',
    }
    for value, message in cases.items():
        assert train_main([*SHARDED, f'load_path={value}']) == 2
        err = capsys.readouterr().err
        assert err.startswith('error: load_path') and message in err, err


def test_a_run_without_sharded_checkpoints_names_the_field_a_folder_needs(written: Path, capsys) -> None:
    assert train_main([DIGITS, f'load_path={written}/latest-rank0.pt']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: load_path: {written}/latest-rank0.pt is a sharded checkpoint (a torch.distributed.'
                          'checkpoint folder), which Composer loads only in a run with sharded checkpoints; set '
                          'parallelism_config: {fsdp: {state_dict_type: sharded}}'), err


def test_the_folder_autoresume_finds_is_checked(written: Path, tmp_path: Path, fsdp2: None, capsys) -> None:
    marker = tmp_path / 'MARKER'
    crafted = _edited(written, tmp_path, CRAFTED_KEY, WritesMarker(marker))
    folder = crafted.parent
    (folder / 'latest-rank0.pt').symlink_to('ep0-ba3')
    assert train_main([*SHARDED, f'save_folder={folder}', 'autoresume=true', 'max_duration=4ba']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: autoresume (the latest checkpoint in save_folder {folder}): '
                          f'{folder}/latest-rank0.pt (the folder {crafted}): {crafted}/__0_0.distcp, '
                          'entry state.callbacks.SamplerSync.data_seed'), err
    assert not marker.exists()



def _with_planner_data(tmp_path: Path, paths: dict[str, tuple]) -> Path:
    """A small ``dist_cp`` checkpoint whose ``.metadata`` places the keys of ``paths`` at those paths."""
    folder = tmp_path / 'small'
    dist_cp.save({'state': {'model': {'w': torch.zeros(2)}, 'step': 4, 'note': 'a'}}, checkpoint_id=folder,
                 no_dist=True)
    metadata = read_metadata(folder)
    metadata.planner_data.update(paths)
    (folder / '.metadata').write_bytes(pickle.dumps(metadata))
    return folder


def test_metadata_paths_that_cannot_make_one_state_are_named_and_build_nothing_large(tmp_path: Path) -> None:
    crossing = _with_planner_data(tmp_path / 'crossing', {'state.note': ('state', 'step', 'note')})
    with pytest.raises(CheckpointError, match=r'places its entries at paths that cannot make one state'):
        load_checked_sharded(crossing)
    huge = _with_planner_data(tmp_path / 'huge', {'state.note': ('state', 10**12)})
    assert load_checked_sharded(huge)['state.note'] == 'a'  # an index past every entry is not a list's: kept flat
