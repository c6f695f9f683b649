"""A resume into its own save folder moves aside only what a crash while saving can leave, and nothing of another run.

A run killed while Composer saved leaves one file after the checkpoint ``latest-rank0.pt``
links to, cut short: 0 bytes, or a zip without its end record. That one file is moved
into ``interrupted-N`` once every check has passed. Anything else later than the latest
(a whole checkpoint of a run that went on or of another run, a link, two leftovers, a
latest link that points out of the folder or nowhere, a latest copied as a plain file)
is refused by ``plan`` and ``train`` alike, exit 2, naming the files and the ways out,
and nothing is moved: every move is decided before any is made. ``autoresume`` is held
to the same rules. The callbacks make the same decision on other entry points
(tests/callbacks/test_interrupted_save.py, tests/neighbours/test_llmfoundry.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer_sampling.recipes.cli import main
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import RunFolders, check_save_folders, saved_after
from composer_sampling.recipes.runner import set_aside_interrupted
from composer_sampling.recipes.schema import load_recipe

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')
#: 320 training samples at global batch 64: 5 batches per epoch.
SYNTHETIC = ['train_loader.dataset={name: synthetic, size: 400}', 'save_interval=1ba']


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A whole checkpoint of the synthetic recipe at batch 2."""
    folder = tmp_path_factory.mktemp('written')
    assert main(['train', DIGITS, *SYNTHETIC, 'max_duration=2ba', f'save_folder={folder}']) == 0
    return folder / 'ep0-ba2-rank0.pt'


def _snapshot(folder: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry below ``folder``: a link and its target, or a file and its bytes."""
    return {str(path.relative_to(folder)): ('link', os.readlink(path)) if path.is_symlink() else
            ('file', path.read_bytes()) for path in folder.rglob('*') if path.is_symlink() or path.is_file()}


def _resume(folder: Path, capsys: pytest.CaptureFixture[str], load: str = 'latest-rank{rank}.pt') -> tuple[int, str]:
    """``train`` resuming ``load`` into ``folder`` (``plan`` runs on the same refusal: tests/support/plan_parity.py)."""
    code = main(['train', DIGITS, *SYNTHETIC, 'max_duration=4ba', f'save_folder={folder}',
                 f'load_path={folder}/{load}'])
    return code, capsys.readouterr().err


def _folder(tmp_path: Path, checkpoint: Path, latest: str = 'ep0-ba2-rank0.pt') -> Path:
    folder = tmp_path / 'run'
    folder.mkdir()
    shutil.copyfile(checkpoint, folder / 'ep0-ba2-rank0.pt')
    (folder / 'latest-rank0.pt').symlink_to(latest)
    return folder


def test_a_roll_back_to_an_earlier_latest_is_refused_and_nothing_moves(tmp_path: Path, checkpoint: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The user points latest back at ep0-ba2 to roll back: the whole checkpoints after it are not a crash's."""
    folder = _folder(tmp_path, checkpoint)
    for name in ('ep0-ba3-rank0.pt', 'ep0-ba4-rank0.pt'):
        shutil.copyfile(checkpoint, folder / name)
    before = _snapshot(folder)
    code, err = _resume(folder, capsys)
    size = checkpoint.stat().st_size
    assert code == 2 and err.startswith(
        f'error: save_folder {folder} holds ep0-ba3-rank0.pt ({size} bytes), ep0-ba4-rank0.pt ({size} bytes) after '
        'ep0-ba2-rank0.pt, the latest checkpoint, which this run resumes. A run that stopped while saving leaves at '
        'most the one checkpoint it was writing, cut short (0 bytes, or a zip without its end record); these were '
        'written by a run that went on, or by another run'), err
    assert err.rstrip().endswith('Move them out of the folder to keep them, choose another save_folder, or set '
                                 'save_overwrite: true to replace them'), err
    assert _snapshot(folder) == before


def test_a_latest_linking_out_of_the_folder_or_copied_or_dangling_is_named(tmp_path: Path, checkpoint: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / 'other-run'
    outside.mkdir()
    shutil.copyfile(checkpoint, outside / 'ep0-ba2-rank0.pt')
    folder = _folder(tmp_path, checkpoint, latest=str(outside / 'ep0-ba2-rank0.pt'))
    (folder / 'ep0-ba3-rank0.pt').write_bytes(b'')  # cut short, but after another run's checkpoint
    before = _snapshot(folder)
    code, err = _resume(folder, capsys)
    assert code == 2 and (f'(latest-rank0.pt links to {outside}/ep0-ba2-rank0.pt, outside the folder), which this run '
                          'would write again') in err, err
    assert _snapshot(folder) == before
    (folder / 'latest-rank0.pt').unlink()
    shutil.copyfile(checkpoint, folder / 'latest-rank0.pt')  # what cp -L or rsync leaves
    code, err = _resume(folder, capsys, load='ep0-ba2-rank0.pt')
    assert code == 2 and ('(latest-rank0.pt is a plain file, not a link, as a copy made with cp -L or rsync leaves '
                          'it: which checkpoint is the latest cannot be told)') in err, err
    (folder / 'latest-rank0.pt').unlink()
    (folder / 'latest-rank0.pt').symlink_to('ep0-ba9-rank0.pt')
    code, err = _resume(folder, capsys, load='ep0-ba2-rank0.pt')
    assert code == 2 and '(latest-rank0.pt links to ep0-ba9-rank0.pt, which does not exist)' in err, err


def test_autoresume_names_a_latest_copied_as_a_plain_file_or_linking_nowhere(tmp_path: Path, checkpoint: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``autoresume`` beside later checkpoints, with ``latest-rank0.pt`` a plain copy of batch 2 (formerly Composer's
    ``FileExistsError`` traceback), then a link to nothing (formerly a refusal that spoke of an earlier run's
    checkpoints): exit 2 naming the link and how to fix it, and nothing moves."""
    folder = _folder(tmp_path, checkpoint)
    for name in ('ep0-ba3-rank0.pt', 'ep0-ba4-rank0.pt'):
        shutil.copyfile(checkpoint, folder / name)
    (folder / 'latest-rank0.pt').unlink()
    shutil.copyfile(checkpoint, folder / 'latest-rank0.pt')  # what cp -L or rsync leaves
    autoresume = ['train', DIGITS, *SYNTHETIC, 'max_duration=6ba', f'save_folder={folder}', 'autoresume=true',
                  'run_name=crashed']
    before = _snapshot(folder)
    assert main(autoresume) == 2
    assert capsys.readouterr().err == (
        f'error: save_folder {folder} holds ep0-ba3-rank0.pt, ep0-ba4-rank0.pt, checkpoints later than the one '
        'autoresume resumes (latest-rank0.pt, at epoch 0, batch 2) (latest-rank0.pt is a plain file, not a link, as a '
        'copy made with cp -L or rsync leaves it: which checkpoint is the latest cannot be told), which this run would '
        'write again; Composer refuses to write over them. Make latest-rank0.pt a link to the checkpoint to resume '
        f'(ln -sfn ep0-ba4-rank0.pt {folder}/latest-rank0.pt), choose another save_folder for this run, or set '
        'save_overwrite: true to replace them\n')
    assert _snapshot(folder) == before
    (folder / 'latest-rank0.pt').unlink()
    (folder / 'latest-rank0.pt').symlink_to('ep0-ba9-rank0.pt')
    before = _snapshot(folder)
    assert main(autoresume) == 2
    assert capsys.readouterr().err == (
        f'error: save_folder {folder} holds checkpoints (ep0-ba2-rank0.pt, ep0-ba3-rank0.pt, ep0-ba4-rank0.pt), but '
        'latest-rank0.pt links to ep0-ba9-rank0.pt, which does not exist, so autoresume finds no checkpoint to resume '
        'and this run would start from batch 0; Composer would refuse to write over them. Make latest-rank0.pt a link '
        f'to the checkpoint to resume (ln -sfn ep0-ba4-rank0.pt {folder}/latest-rank0.pt), resume with '
        f'load_path={folder}/ep0-ba4-rank0.pt, choose another save_folder, or set save_overwrite: true to replace '
        'them\n')
    assert _snapshot(folder) == before


def test_a_dangling_link_named_like_a_checkpoint_is_named_and_nothing_moves(tmp_path: Path, checkpoint: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, checkpoint)
    (folder / 'ep0-ba3-rank0.pt').symlink_to('/nonexistent/ep0-ba3-rank0.pt')
    before = _snapshot(folder)
    code, err = _resume(folder, capsys)
    assert code == 2 and (f'save_folder {folder} holds ep0-ba3-rank0.pt (a link to /nonexistent/ep0-ba3-rank0.pt, '
                          'which does not exist) after ep0-ba2-rank0.pt') in err, err
    assert _snapshot(folder) == before


def test_a_cut_short_file_goes_past_a_dangling_interrupted_folder_name(tmp_path: Path, checkpoint: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, checkpoint)
    whole = checkpoint.read_bytes()
    (folder / 'ep0-ba3-rank0.pt').write_bytes(whole[:len(whole) // 3])
    (folder / 'interrupted-1').symlink_to('/nonexistent/interrupted')
    assert main(['train', DIGITS, *SYNTHETIC, 'max_duration=4ba', f'save_folder={folder}',
                 f'load_path={folder}/latest-rank{{rank}}.pt']) == 0
    assert (folder / 'interrupted-2' / 'ep0-ba3-rank0.pt').read_bytes() == whole[:len(whole) // 3]
    assert os.readlink(folder / 'interrupted-1') == '/nonexistent/interrupted'
    assert f'moved ep0-ba3-rank0.pt ({len(whole) // 3} bytes) to {folder}/interrupted-2: cut short after' in \
        capsys.readouterr().out


#: What may follow the latest checkpoint in a save folder: each kind, and whether it is what a crash leaves.
KINDS = {'whole': False, 'empty': True, 'zip cut short': True, 'text': False, 'dangling link': False,
         'link to a whole checkpoint': False}


def _place(path: Path, kind: str, whole: bytes) -> None:
    if kind == 'whole':
        path.write_bytes(whole)
    elif kind == 'empty':
        path.write_bytes(b'')
    elif kind == 'zip cut short':
        path.write_bytes(whole[:len(whole) // 2])
    elif kind == 'text':
        path.write_text('not a checkpoint')
    elif kind == 'dangling link':
        path.symlink_to(path.parent / 'nowhere.pt')
    else:
        path.symlink_to(path.parent / 'ep0-ba2-rank0.pt')


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(sorted(KINDS)), max_size=3))
def test_only_one_file_a_crash_left_is_ever_moved(kinds: list[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    """Whatever follows the latest checkpoint: either it is one file a save cut short and exactly it moves, or the
    resume is refused before anything moves (the runner's own functions, in the order ``train`` calls them)."""
    folder = tmp_path_factory.mktemp('property')
    torch.save({'state': {}}, folder / 'ep0-ba2-rank0.pt')
    whole = (folder / 'ep0-ba2-rank0.pt').read_bytes()
    (folder / 'latest-rank0.pt').symlink_to('ep0-ba2-rank0.pt')
    for k, kind in enumerate(kinds):
        _place(folder / f'ep0-ba{3 + k}-rank0.pt', kind, whole)
    before = _snapshot(folder)
    recipe = load_recipe(None, [f'save_folder={folder}', f'load_path={folder}/latest-rank{{rank}}.pt'])
    folders = RunFolders(str(folder), None)
    later = saved_after(recipe, folders, str(folder / 'latest-rank0.pt'))
    movable = len(kinds) == 1 and KINDS[kinds[0]]
    try:
        check_save_folders(recipe, None, folders, later)
    except RecipeError:
        assert not movable and kinds
        assert _snapshot(folder) == before
        return
    assert movable or not kinds
    moved = set_aside_interrupted(later)
    after = _snapshot(folder)
    if not kinds:
        assert moved is None and after == before
        return
    assert moved == folder / 'interrupted-1'
    assert after == {('interrupted-1/' + name if name == 'ep0-ba3-rank0.pt' else name): entry
                     for name, entry in before.items()}
