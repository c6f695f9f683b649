"""Every path a recipe's parts write is filled as Composer fills it and checked like the save folder, before training.

Composer's ``FileLogger`` opens its file with ``'w+'`` whatever its ``overwrite``
says: pointed at an earlier run's file (a checkpoint, or the log of a run of the same
name) it cut the file to nothing, exit 0. The loggers' folders must be folders this
process can write. The ledger goes into the folder Composer saves to, even when the
run name holds braces.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from composer.utils import format_name_with_dist
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling.audit import audit_folder
from composer_sampling.recipes.cli import main
from composer_sampling.recipes.folders import run_folders
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.schema import load_recipe

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')
SYNTHETIC = [DIGITS, 'train_loader.dataset={name: synthetic, size: 400}', 'max_duration=2ba', 'save_interval=1ba']


def _run(command: str, overrides: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main([command, *SYNTHETIC, *overrides])
    return code, capsys.readouterr().err


def test_a_file_logger_never_cuts_an_earlier_runs_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    earlier = tmp_path / 'earlier'
    assert main(['train', *SYNTHETIC, f'save_folder={earlier}']) == 0
    checkpoint = earlier / 'ep0-ba1-rank0.pt'
    kept = checkpoint.read_bytes()
    capsys.readouterr()
    for command in ('plan', 'train'):  # at a checkpoint: refused, by both
        code, err = _run(command, [f'save_folder={tmp_path}/new', f'loggers.file={{filename: {checkpoint}}}'], capsys)
        assert code == 2 and err.startswith(f"error: loggers.file.filename '{checkpoint}' exists ({len(kept)} bytes, "
                                            "a checkpoint): Composer's FileLogger opens its file with 'w+'"), err
    assert checkpoint.read_bytes() == kept
    monkeypatch.chdir(tmp_path)  # the default filename, {run_name}/logs-rank{rank}.txt, is relative
    logged = ['run_name=named', 'loggers.file={}']
    assert main(['train', *SYNTHETIC, f'save_folder={tmp_path}/first', *logged]) == 0
    log = tmp_path / 'named' / 'logs-rank0.txt'
    first = log.read_bytes()
    capsys.readouterr()
    code, err = _run('train', [f'save_folder={tmp_path}/second', *logged], capsys)  # a fresh run of the same name
    assert code == 2 and err.startswith("error: loggers.file.filename '{run_name}/logs-rank{rank}.txt' "
                                        f"(named/logs-rank0.txt for this run) exists ({len(first)} bytes, an earlier "
                                        "run's file)"), err
    assert log.read_bytes() == first
    resumed = [f'save_folder={tmp_path}/first', f'load_path={tmp_path}/first/latest-rank{{rank}}.pt',
               'max_duration=3ba']
    assert main(['train', *SYNTHETIC, *logged, *resumed]) == 0  # the same run, resumed: its log starts again
    assert main(['train', *SYNTHETIC, f'save_folder={tmp_path}/third', *logged, 'save_overwrite=true']) == 0


@pytest.mark.parametrize(('logger', 'field'), [
    ('tensorboard={{log_dir: {file}/logs}}', 'loggers.tensorboard.log_dir'),
    ('wandb={{init_kwargs: {{dir: {file}/wandb}}}}', 'loggers.wandb.init_kwargs.dir'),
    ('mlflow={{tracking_uri: "file:{file}/mlruns"}}', 'loggers.mlflow.tracking_uri'),
])
def test_a_loggers_folder_under_a_file_is_refused(logger: str, field: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / 'a-file'
    file.write_text('')
    code, err = _run('train', [f'loggers.{logger.format(file=file)}'], capsys)
    assert code == 2 and field in err and f'cannot be created: {file} is not a folder this process may write to' \
        in err, err


def test_the_ledger_goes_where_composer_saves_whatever_the_run_name_holds(tmp_path: Path) -> None:
    """run_name 'x{rank}' in save_folder '{run_name}': Composer fills it once, writing into 'x{rank}'."""
    assert main(['train', *SYNTHETIC, f'save_folder={tmp_path}/{{run_name}}', 'run_name=x{rank}',
                 'callbacks.sample_ledger={}']) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ['x{rank}']
    assert (tmp_path / 'x{rank}' / 'ledger').is_dir()
    assert audit_folder(tmp_path / 'x{rank}').epochs[0].trained == 128


@settings(max_examples=80, deadline=None)
@given(run_name=st.text('ab{}_-', min_size=1, max_size=6),
       pieces=st.lists(st.sampled_from(['runs', '{run_name}', '{rank}', 'a{{b}}', '-']), min_size=1, max_size=4))
def test_the_ledger_folder_is_in_the_save_folder_composer_fills(run_name: str, pieces: list[str]) -> None:
    template = '/'.join(pieces)
    try:
        saved = format_name_with_dist(template, run_name)
    except (ValueError, KeyError, IndexError):
        return
    recipe = load_recipe(None, [f"save_folder='{template}'", f"run_name='{run_name}'", 'callbacks.sample_ledger={}'])
    spec = resolve(recipe)
    try:
        folders = run_folders(recipe, spec.ledger_folder, spec.run_name)
    except Exception as error:  # a folder Composer reads as a URI is refused: not this property's concern
        assert "Composer reads the local path" in str(error)
        return
    assert folders.save == saved and folders.ledger == f'{saved}/ledger'
