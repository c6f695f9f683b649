"""A checkpoint cannot run code: load_path is checked with weights_only=True before Composer unpickles it."""

from __future__ import annotations

import contextlib
import decimal
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from composer.utils.checkpoint import _format_path_with_rank_zero
from composer.utils.file_helpers import is_tar, parse_uri
from composer.utils.misc import partial_format
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling import CheckpointError, check_checkpoint
from composer_sampling._checkpoint.safe_load import (
    composer_handoff,
    composer_load_path,
    composer_safe_globals,
    resolve_safe_global,
)
from composer_sampling.recipes.build_training import build_run
from composer_sampling.recipes.checks import checked_spec
from composer_sampling.recipes.cli import main as cli_main
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.runner import train
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import main as train_main

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')


class WritesMarker:
    """Unpickling this calls ``exec``, which writes ``marker``: the payload of a crafted checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return exec, (f'open({str(self.marker)!r}, "w").write("ran")',)


def _script(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, 'PYTHONWARNINGS': 'ignore'}
    return subprocess.run([sys.executable, '-m', 'composer_sampling.train', *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.fixture(scope='module')
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The save folder of a digits recipe run that saved after batches 1 and 2."""
    folder = tmp_path_factory.mktemp('run') / 'checkpoints'
    assert train_main([DIGITS, 'max_duration=2ba', f'save_folder={folder}', 'save_interval=1ba']) == 0
    return folder


@pytest.fixture()
def evil(tmp_path: Path) -> tuple[Path, Path]:
    """A crafted checkpoint (a Composer-shaped dict) whose unpickling would write a marker file."""
    marker = tmp_path / 'MARKER'
    path = tmp_path / 'evil.pt'
    torch.save({'state': {'model': WritesMarker(marker)}, 'rng': []}, path)
    return path, marker


def test_the_payload_is_real(tmp_path: Path) -> None:
    """What Composer's own load would do: the crafted file runs its code."""
    marker = tmp_path / 'ran-with-weights-only-false'
    torch.save({'state': WritesMarker(marker)}, tmp_path / 'evil.pt')
    torch.load(tmp_path / 'evil.pt', weights_only=False)
    assert marker.read_text() == 'ran'


def test_a_checkpoint_our_recipe_wrote_passes(written: Path) -> None:
    for name in ('ep0-ba1-rank0.pt', 'ep0-ba2-rank0.pt', 'latest-rank0.pt'):
        assert check_checkpoint(written / name) == str(written / name)
    recipe = load_recipe(DIGITS, [f'load_path={written}/ep0-ba2-rank{{rank}}.pt', 'max_duration=3ba'])
    checked_spec(resolve(recipe), world_size=2)  # every rank reads rank 0's file, as Composer does


def test_the_allow_list_is_exactly_what_composer_needs(written: Path) -> None:
    """Each entry is needed by a real checkpoint, except the name numpy's other major version pickles under."""
    other_numpy = ('numpy.core.multiarray._reconstruct' if np.__version__ >= '2'
                   else 'numpy._core.multiarray._reconstruct')
    entries = [entry for entry in composer_safe_globals() if not (isinstance(entry, tuple) and entry[1] == other_numpy)]
    for dropped in entries:
        with torch.serialization.safe_globals([e for e in entries if e is not dropped]), \
                pytest.raises(Exception, match='Weights only load failed'):
            torch.load(written / 'ep0-ba2-rank0.pt', weights_only=True)


def _with_numpy_1_names(source: Path, target: Path) -> None:
    """``source`` re-zipped with numpy 1.x's module name for ``_reconstruct``, as numpy 1.x pickles it."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, 'w') as new:
        for info in old.infolist():
            data = old.read(info.filename)
            if info.filename.endswith('/data.pkl'):
                assert b'numpy._core.multiarray\n' in data
                data = data.replace(b'numpy._core.multiarray\n', b'numpy.core.multiarray\n')
            new.writestr(info.filename, data)


@pytest.mark.skipif(np.__version__ < '2', reason='numpy 2 writes the numpy._core names this rewrites')
def test_numpy_1_and_2_names_both_pass(written: Path, tmp_path: Path) -> None:
    old_names = tmp_path / 'numpy1.pt'
    _with_numpy_1_names(written / 'ep0-ba2-rank0.pt', old_names)
    assert 'numpy.core.multiarray._reconstruct' in torch.serialization.get_unsafe_globals_in_checkpoint(old_names)
    assert check_checkpoint(old_names) == str(old_names)


def test_a_crafted_pickle_is_refused_and_runs_nothing(evil: tuple[Path, Path]) -> None:
    path, marker = evil
    with pytest.raises(CheckpointError, match=r'needs builtins\.exec, outside the types') as error:
        check_checkpoint(path)
    assert error.value.reason == 'unsafe'
    assert not marker.exists()


def test_the_script_refuses_a_crafted_pickle_before_anything_runs(evil: tuple[Path, Path]) -> None:
    path, marker = evil
    result = _script(DIGITS, f'load_path={path}')
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f'error: load_path: {path} needs builtins.exec'), result.stderr
    assert 'trust_checkpoint: true' in result.stderr
    assert 'run summary' not in result.stdout
    assert not marker.exists()


def test_plan_refuses_it_with_the_same_message(evil: tuple[Path, Path], capsys) -> None:
    path, marker = evil
    assert train_main([DIGITS, f'load_path={path}']) == 2
    trained = capsys.readouterr()
    assert cli_main(['plan', DIGITS, f'load_path={path}']) == 2
    planned = capsys.readouterr()
    assert trained.err == planned.err != ''
    assert 'run summary' not in trained.out
    assert not marker.exists()


@pytest.fixture()
def with_decimal(written: Path, tmp_path: Path) -> Path:
    """A real checkpoint that also carries a ``decimal.Decimal``: a type outside the allow-list, trusted here."""
    checkpoint = torch.load(written / 'ep0-ba2-rank0.pt', weights_only=False)  # our own file
    checkpoint['note'] = decimal.Decimal('1.5')
    path = tmp_path / 'with-decimal.pt'
    torch.save(checkpoint, path)
    return path


def test_a_recipe_extends_the_allow_list_or_trusts_the_file(with_decimal: Path, capsys) -> None:
    load = f'load_path={with_decimal}'
    assert train_main([DIGITS, load]) == 2
    assert f'error: load_path: {with_decimal} needs decimal.Decimal' in capsys.readouterr().err
    checked_spec(resolve(load_recipe(DIGITS, [load, 'checkpoint_safe_globals=[decimal:Decimal]'])), world_size=1)
    checked_spec(resolve(load_recipe(DIGITS, [load, 'trust_checkpoint=true'])), world_size=1)
    with pytest.raises(RecipeError, match=r"checkpoint_safe_globals\[0\]: safe global 'decimal:Dezimal' cannot be"):
        checked_spec(resolve(load_recipe(DIGITS, [load, 'checkpoint_safe_globals=[decimal:Dezimal]'])), world_size=1)


def test_trust_checkpoint_lets_a_trusted_checkpoint_resume(with_decimal: Path, capsys) -> None:
    assert train_main([DIGITS, f'load_path={with_decimal}', 'trust_checkpoint=true', 'max_duration=3ba']) == 0
    out = capsys.readouterr().out
    assert 'run summary' in out
    assert 'held-out after 0 epochs' in out


def _truncated(written: Path, tmp_path: Path) -> Path:
    data = (written / 'ep0-ba2-rank0.pt').read_bytes()
    path = tmp_path / 'truncated.pt'
    path.write_bytes(data[: len(data) // 2])
    return path


def _text(tmp_path: Path) -> Path:
    path = tmp_path / 'notes.pt'
    path.write_text('not a checkpoint\n')
    return path


def _tensor(tmp_path: Path) -> Path:
    path = tmp_path / 'tensor.pt'
    torch.save(torch.zeros(3), path)
    return path


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / 'empty.pt'
    path.touch()
    return path


@pytest.mark.parametrize(
    ('make', 'message', 'reason'),
    [
        (lambda written, tmp: tmp / 'missing.pt', 'missing.pt does not exist', 'invalid'),
        (lambda written, tmp: written, 'is a directory (a sharded checkpoint?)', 'unchecked'),
        (_truncated, 'truncated.pt is not a readable checkpoint (truncated, or not written by torch.save)', 'invalid'),
        (lambda written, tmp: _text(tmp), 'notes.pt is not a readable checkpoint', 'invalid'),
        (lambda written, tmp: _tensor(tmp), "tensor.pt is not a Composer checkpoint: it holds a Tensor", 'invalid'),
        (lambda written, tmp: _empty(tmp), 'empty.pt is empty, not a checkpoint', 'invalid'),
    ],
    ids=['missing', 'directory', 'truncated', 'text', 'tensor', 'empty'],
)
def test_files_that_cannot_be_checked_are_named_errors(make, message, reason, written, tmp_path, capsys) -> None:
    path = make(written, tmp_path)
    with pytest.raises(CheckpointError, match=re.escape(message)) as error:
        check_checkpoint(path)
    assert error.value.reason == reason
    assert train_main([DIGITS, f'load_path={path}']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: load_path: {path}') and message in err
    assert ('trust_checkpoint: true' in err) == (reason == 'unchecked')


def test_check_checkpoint_is_local_only_and_a_scheme_composer_cannot_read_is_refused(capsys) -> None:
    """check_checkpoint in Python refuses a URI (download it first); a recipe downloads what Composer can read."""
    for uri in ('s3://bucket/run/ep1-rank0.pt', 'https://example.com/ep1.pt'):
        with pytest.raises(CheckpointError, match=re.escape(f'{uri} is a URI')) as error:
            check_checkpoint(uri)
        assert error.value.reason == 'unchecked' and 'download it first' in str(error.value)
    assert train_main([DIGITS, 'load_path=https://example.com/ep1.pt']) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: load_path: https://example.com/ep1.pt: Composer has no object store for https://')


def test_trust_checkpoint_passes_what_cannot_be_checked_but_not_a_missing_file(written, tmp_path) -> None:
    for path in ('s3://bucket/run/ep1-rank0.pt', str(written)):
        checked_spec(resolve(load_recipe(DIGITS, [f'load_path={path}', 'trust_checkpoint=true'])), world_size=1)
    with pytest.raises(RecipeError, match=r'missing\.pt does not exist'):
        checked_spec(resolve(load_recipe(DIGITS, [f'load_path={tmp_path}/missing.pt', 'trust_checkpoint=true'])),
                   world_size=1)


def test_load_path_is_formatted_as_composer_formats_it(written: Path) -> None:
    assert composer_load_path('a/{run_name}/ba2-rank{rank}-{local_rank}-{node_rank}.pt', 'r') == 'a/r/ba2-rank0-0-0.pt'
    with pytest.raises(CheckpointError, match=r'uses \{run_name\} but the run has no run_name'):
        composer_load_path('a/{run_name}/ba2.pt')
    with pytest.raises(CheckpointError, match=r'cannot be formatted as Composer does .*\{run_name\}, \{rank\}'):
        composer_load_path('a/ep{epoch}.pt')
    recipe = load_recipe(DIGITS, [f'load_path={written.parent}/{{run_name}}/ep0-ba2-rank{{rank}}.pt',
                                  'run_name=checkpoints'])
    checked_spec(resolve(recipe), world_size=2)
    with pytest.raises(RecipeError, match=r"load_path '.*ep0-ba9-rank\{rank\}.pt': .*ep0-ba9-rank0.pt does not"):
        checked_spec(resolve(load_recipe(DIGITS, [f'load_path={written}/ep0-ba9-rank{{rank}}.pt'])), world_size=2)


def test_safe_globals_are_named_module_colon_name() -> None:
    assert resolve_safe_global('decimal:Decimal') == [(decimal.Decimal, 'decimal.Decimal')]
    with pytest.raises(CheckpointError, match="must look like 'module:Name'"):
        resolve_safe_global('decimal.Decimal')
    with pytest.raises(RecipeError, match=r"checkpoint_safe_globals\[0\] must look like 'module:Name'"):
        load_recipe(DIGITS, ['checkpoint_safe_globals=[os.system]'])


def test_the_check_imports_no_composer() -> None:
    code = ('import sys; from composer_sampling import check_checkpoint; import composer_sampling.recipes.schema; '
            "print(sorted(m for m in sys.modules if m == 'composer' or m.startswith('composer.')))")
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '[]'


def composers_own_path(template: str, run_name: str) -> tuple[str, bool]:
    """The file Composer's own functions read for ``template`` (rank 0), and whether it would unpack an archive.

    The calls of ``Trainer.__init__`` (``parse_uri``), ``load_checkpoint``
    (``partial_format`` of ``{run_name}``), ``download_checkpoint`` (``is_tar``, then
    the rank fields) and ``get_file`` (``parse_uri`` again), in that order.
    """
    _, _, path = parse_uri(template)
    path = partial_format(path, run_name=run_name)
    parts = path.split('.')
    archive = is_tar(path) or (len(parts) >= 2 and parts[-2] == 'pt' and parts[-1] != 'symlink')
    path = _format_path_with_rank_zero(path)
    backend, _, path = parse_uri(path)
    assert backend == '', 'the generated templates have no scheme'
    return path, archive


_PIECES = st.sampled_from(['ckpt', '/', '.', 'pt', 'tar', '-', '#', '?', ';', ':', 'AZURE_BLOBS', ' ', '{', '}',
                           '{{', '}}', '{run_name}', '{rank}', '{local_rank}', '{node_rank}', '{rank:>3}',
                           '{rank!s:z>1.0}', '{run_name!r}', '{run_name:.2}', '{{rank}}', '{{run_name}}', '{epoch}',
                           '{0}', '{}', '{rank[0]}', '{run_name.x}', '{world_size}', 'ba{batch}'])
_TEMPLATES = st.lists(_PIECES, max_size=8).map(''.join).map(lambda text: 'ckpt/' + text)
_RUN_NAMES = st.one_of(st.sampled_from(['run', '{rank}', '{{rank}}', '{', '}', '{run_name}', '#x', 'a.tar']),
                       st.text(st.sampled_from('ab{}#.:/'), max_size=6))


@pytest.mark.composer
@settings(max_examples=300, deadline=None)
@given(template=_TEMPLATES, run_name=_RUN_NAMES)
def test_the_path_checked_is_the_path_composer_reads(template: str, run_name: str) -> None:
    """On every generated template and run name, Composer's own functions and the check pick one file (or both fail)."""
    try:
        expected, archive = composers_own_path(template, run_name)
    except Exception:  # Composer stops on this template: the check must refuse it too
        with pytest.raises(CheckpointError):
            composer_load_path(template, run_name)
        return
    if archive:
        with pytest.raises(CheckpointError, match='is an archive') as error:
            composer_load_path(template, run_name)
        assert error.value.reason == 'unchecked'
        return
    assert composer_load_path(template, run_name) == expected
    try:  # without a run name, Composer invents one: the check refuses exactly when the path depends on it
        unnamed = composer_load_path(template)
    except CheckpointError as error:
        try:
            invented = {composers_own_path(template, name)[0] for name in ('run-x', 'run-y')}
        except Exception:  # Composer stops on the name it would invent: refused either way
            return
        assert 'but the run has no run_name' in str(error)
        assert len(invented) == 2
    else:
        assert unnamed == composers_own_path(template, 'run-x')[0] == composers_own_path(template, 'run-y')[0]


@pytest.mark.composer
@settings(max_examples=300, deadline=None)
@given(path=st.lists(st.sampled_from([*'ab/.{}#?;:-_ ', 'pt', 'tar', '{rank}', '{{', 'AZURE_BLOBS', '//']),
                     min_size=1, max_size=10).map(''.join))
def test_what_composer_is_handed_reads_the_file_checked(path: str) -> None:
    """Composer's own formatting of what the check hands over is the file checked, or the check refuses to hand it."""
    try:
        handed = composer_handoff(path)
    except CheckpointError as error:
        assert 'cannot be given to Composer as it is' in str(error)
        try:
            read, archive = composers_own_path(path.replace('{', '{{{{').replace('}', '}}}}'), 'run')
        except Exception:  # Composer would stop, or download it
            return
        assert read != path or archive, 'refused only what Composer would read as another file'
        return
    for run_name in ('run', '{rank}', '}{'):
        assert composers_own_path(handed, run_name) == (path, False)


def _hostile_folder(folder: Path, real: Path) -> dict[str, Path]:
    """A folder where a one-pass format and Composer's two passes name different files: ``0.pt`` and ``{rank}.pt``."""
    folder.mkdir()
    marker = folder / 'MARKER'
    evil = folder / 'evil.pt'
    torch.save({'state': {'model': WritesMarker(marker)}, 'rng': []}, evil)
    return {'marker': marker, 'evil': evil, 'real': real}


@pytest.mark.composer
@pytest.mark.parametrize(('template', 'run_name', 'composer_reads', 'one_pass_reads'), [
    ('{{rank}}.pt', None, '0.pt', '{rank}.pt'),
    ('{rank:>3}.pt', None, '0.pt', '  0.pt'),
    ('{run_name}.pt', '{rank}', '0.pt', '{rank}.pt'),
    ('0.pt#.safe', None, '0.pt', '0.pt#.safe'),
], ids=['doubled-braces', 'format-spec', 'braces-in-run_name', 'fragment'])
def test_a_crafted_template_never_loads_the_file_it_did_not_check(template: str, run_name: str | None,
                                                                   composer_reads: str, one_pass_reads: str,
                                                                   written: Path, tmp_path: Path, capsys) -> None:
    """The real runner and Trainer: the file Composer reads is checked, whatever a one-pass format would check."""
    folder = tmp_path / 'hostile'
    files = _hostile_folder(folder, written / 'ep0-ba2-rank0.pt')
    named = ['max_duration=3ba'] + ([f"run_name='{run_name}'"] if run_name else [])
    load = f"load_path='{folder}/{template}'"
    # the evil file where Composer reads, a good one where a one-pass format would look: refused, nothing runs
    files['evil'].rename(folder / composer_reads)
    (folder / one_pass_reads).write_bytes(files['real'].read_bytes())
    assert train_main([DIGITS, *named, load]) == 2
    assert 'needs builtins.exec' in capsys.readouterr().err
    assert not files['marker'].exists()
    # the other way round: the good file where Composer reads trains, the evil one is never touched
    (folder / one_pass_reads).rename(folder / 'swap')
    (folder / composer_reads).rename(folder / one_pass_reads)
    (folder / 'swap').rename(folder / composer_reads)
    assert train_main([DIGITS, *named, load]) == 0
    assert 'held-out after' in capsys.readouterr().out
    assert not files['marker'].exists()


def test_a_file_rewritten_after_the_check_is_not_loaded(written: Path, tmp_path: Path) -> None:
    """Composer loads the private copy that was checked, not the file at load_path as it is later."""
    path = tmp_path / 'resume.pt'
    path.write_bytes((written / 'ep0-ba2-rank0.pt').read_bytes())
    recipe = load_recipe(DIGITS, [f'load_path={path}', 'max_duration=3ba'])
    run = build_run(resolve(recipe), world_size=1, rank=0)  # checked here
    marker = tmp_path / 'MARKER'
    torch.save({'state': {'model': WritesMarker(marker)}, 'rng': []}, path)  # rewritten before Composer loads it
    result = train(recipe, run=run)
    assert int(result.trainer.state.timestamp.batch) == 3  # resumed from batch 2 of the file checked
    assert not marker.exists()


def test_check_checkpoint_returns_what_composer_reads_as_the_file(written: Path, tmp_path: Path) -> None:
    braced = tmp_path / 'run{rank}' / 'ep{0}.pt'
    braced.parent.mkdir()
    braced.write_bytes((written / 'ep0-ba2-rank0.pt').read_bytes())
    handed = check_checkpoint(braced)
    assert handed != str(braced) and composers_own_path(handed, 'run') == (str(braced), False)
    hashed = tmp_path / 'ep#1.pt'
    hashed.write_bytes(braced.read_bytes())
    with pytest.raises(CheckpointError, match=r"Composer would read .*/ep instead; rename the file without '#'"):
        check_checkpoint(hashed)


@pytest.mark.parametrize('field', ['data_seed', 'replication'])
def test_a_checkpoint_value_out_of_range_is_blamed_on_load_path(field: str, written: Path, tmp_path: Path,
                                                                 capsys) -> None:
    checkpoint = torch.load(written / 'ep0-ba2-rank0.pt', weights_only=False)  # our own file
    checkpoint['state']['callbacks']['SamplerSync'][field] = -5
    path = tmp_path / 'edited.pt'
    torch.save(checkpoint, path)
    commands = [['train'], ['plan']] if field == 'data_seed' else [['train']]  # plan reads only the seed
    for command in commands:
        assert cli_main([*command, DIGITS, f'load_path={path}']) == 2
        err = capsys.readouterr().err
        assert err.startswith(f'error: load_path: the checkpoint {path} holds a SamplerSync state that cannot be '
                              f'loaded (SamplerSync state {field} must be in the interval '), err
        assert 'damaged or was not written by SamplerSync' in err and 'Traceback' not in err


@pytest.mark.parametrize(('edit', 'problem'), [
    ({'lineage': 5}, 'SampleLedger state has lineage=5; it must be a str or None'),
    ({'batch': 'two'}, "SampleLedger state has batch='two'; it must be a int or None"),
    ({'version': 9}, 'SampleLedger state has version 9; this version of composer-sampling reads version 1'),
])
def test_an_edited_sample_ledger_state_is_blamed_on_load_path(edit: dict, problem: str, written: Path,
                                                              tmp_path: Path, capsys) -> None:
    """Composer loads it inside the Trainer, where SampleLedger's refusal was a traceback (exit 1)."""
    checkpoint = torch.load(written / 'ep0-ba2-rank0.pt', weights_only=False)  # our own file
    checkpoint['state']['callbacks']['SampleLedger'] = {'version': 1, 'lineage': 'l1', 'attempt': 'a1', 'batch': 2,
                                                        **edit}
    path = tmp_path / 'edited.pt'
    torch.save(checkpoint, path)
    assert train_main([DIGITS, f'load_path={path}', 'callbacks.sample_ledger={}', f'save_folder={tmp_path / "run"}',
                       'max_duration=3ba']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: load_path: the checkpoint {path} holds a SampleLedger state that cannot be loaded '
                          f'({problem}'), err
    assert 'damaged or was not written by SampleLedger' in err and len(err.splitlines()) == 1


def test_a_checkpoint_of_another_model_shape_is_named_before_training(written: Path, capsys) -> None:
    load = f'load_path={written}/ep0-ba2-rank0.pt'
    assert train_main([DIGITS, load, 'model.hidden_size=32', 'max_duration=3ba']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: load_path: the checkpoint {written}/ep0-ba2-rank0.pt holds net.0.weight of shape '
                          '[64, 64], the model (mlp) has net.0.weight of shape [32, 64]'), err
    assert 'Traceback' not in err


@pytest.mark.parametrize('value', ["''", "'  '"])
def test_an_empty_load_path_is_named_as_empty(value: str, capsys) -> None:
    for command in ('plan', 'train'):
        assert cli_main([command, DIGITS, f'load_path={value}']) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: load_path is empty ({value.strip(chr(39))!r}): give the checkpoint file to "
                              'load, or leave load_path out'), err


# ---------------------------------------------------------------------------------------------------------------
# A remote load_path: downloaded as Composer downloads it, checked, and the checked local copy is what Composer loads


def _upload(uri: str, source: Path) -> None:
    """Put the local file ``source`` at ``uri`` (s3://bucket/key) through Composer's own object store."""
    from composer.utils import maybe_create_object_store_from_uri, parse_uri

    store = maybe_create_object_store_from_uri(uri)
    assert store is not None
    store.upload_object(parse_uri(uri)[2], source)


@pytest.mark.s3
def test_a_remote_load_path_trains_from_the_checked_copy(s3_bucket: str, written: Path,
                                                         evil: tuple[Path, Path]) -> None:
    """The object is fetched and checked before the Trainer exists; rewriting it afterwards changes nothing."""
    _upload(f'{s3_bucket}/runs/remote/ep0-ba2-rank0.pt', written / 'ep0-ba2-rank0.pt')
    template = f'{s3_bucket}/runs/{{run_name}}/ep0-ba2-rank{{rank}}.pt'  # placeholders filled as Composer fills them
    recipe = load_recipe(DIGITS, [f'load_path={template}', 'run_name=remote', 'max_duration=3ba'])
    run = build_run(resolve(recipe), world_size=1, rank=0)  # downloaded and checked here
    handed = run.checked.checkpoints['load_path'].load_path
    assert not handed.startswith('s3:') and Path(handed).read_bytes() == (written / 'ep0-ba2-rank0.pt').read_bytes()
    crafted, marker = evil
    _upload(f'{s3_bucket}/runs/remote/ep0-ba2-rank0.pt', crafted)  # rewritten in the bucket before Composer loads
    result = train(recipe, run=run)
    assert int(result.trainer.state.timestamp.batch) == 3  # resumed from batch 2 of the object checked
    assert not marker.exists()


@pytest.mark.s3
@pytest.mark.parametrize('field', ['load_path', 'callbacks.load_checkpoint.load_path'])
def test_a_crafted_checkpoint_in_the_bucket_is_refused_and_runs_nothing(field: str, s3_bucket: str,
                                                                        evil: tuple[Path, Path], capsys) -> None:
    crafted, marker = evil
    uri = f'{s3_bucket}/run/evil.pt'
    _upload(uri, crafted)
    for command in ('plan', 'train'):
        assert cli_main([command, DIGITS, f'{field}={uri}', 'max_duration=2ba']) == 2
        err = capsys.readouterr().err
        assert err.startswith(f'error: {field}: {uri} needs builtins.exec') and 'trust_checkpoint: true' in err, err
        assert not marker.exists()


@pytest.mark.s3
def test_trust_checkpoint_hands_the_uri_to_composer_unchecked(s3_bucket: str, evil: tuple[Path, Path]) -> None:
    """Only trust_checkpoint: true skips the check: Composer downloads and unpickles the object itself."""
    crafted, marker = evil
    uri = f'{s3_bucket}/run/evil.pt'
    _upload(uri, crafted)
    train_main([DIGITS, f'load_path={uri}', 'trust_checkpoint=true', 'max_duration=2ba'])
    assert marker.read_text() == 'ran'  # unpickled by Composer: the payload ran


@pytest.mark.s3
def test_a_remote_checkpoint_that_cannot_be_fetched_is_a_named_error(s3_bucket: str, capsys) -> None:
    for uri, message in ((f'{s3_bucket}/run/missing.pt', 'does not exist in its object store; check the path'),
                         ('s3://no-such-bucket-here/run/ep1.pt', "the bucket 'no-such-bucket-here' does not exist")):
        assert train_main([DIGITS, f'load_path={uri}']) == 2
        err = capsys.readouterr().err
        assert err.startswith(f'error: load_path: {uri}') and message in err and len(err.splitlines()) == 1, err


# autoresume: the checkpoint it picks is checked as load_path is

def test_the_checkpoint_autoresume_picks_is_checked(tmp_path: Path, evil: tuple[Path, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A crafted file behind the save folder's latest link is refused before Composer sees it; only
    ``trust_checkpoint: true`` hands it to Composer, which unpickles it."""
    crafted, marker = evil
    folder = tmp_path / 'run'
    folder.mkdir()
    (folder / 'ep0-ba3-rank0.pt').write_bytes(crafted.read_bytes())
    (folder / 'latest-rank0.pt').symlink_to('ep0-ba3-rank0.pt')
    command = [DIGITS, f'save_folder={folder}', 'run_name=crafted', 'autoresume=true', 'max_duration=2ba']
    assert train_main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: autoresume (the latest checkpoint in save_folder {folder}): '
                          f'{folder}/latest-rank0.pt needs builtins.exec'), err
    assert 'trust_checkpoint: true' in err and not marker.exists()
    with contextlib.suppress(Exception):  # Composer goes on with the crafted state once it has unpickled it
        train_main([*command, 'trust_checkpoint=true'])
    assert marker.read_text() == 'ran'


@pytest.mark.s3
def test_the_checkpoint_a_remote_autoresume_picks_is_checked(s3_bucket: str, evil: tuple[Path, Path], tmp_path: Path,
                                                              capsys) -> None:
    """The latest pointer Composer uploads beside a remote checkpoint (``latest-rank0.pt.symlink``) is followed as
    Composer follows it, and the object it names is checked before Composer sees it."""
    crafted, marker = evil
    _upload(f'{s3_bucket}/run/ep0-ba3-rank0.pt', crafted)
    pointer = tmp_path / 'pointer'
    pointer.write_text('run/ep0-ba3-rank0.pt')
    _upload(f'{s3_bucket}/run/latest-rank0.pt.symlink', pointer)
    assert train_main([DIGITS, f'save_folder={s3_bucket}/run', 'run_name=r', 'autoresume=true']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: autoresume (the latest checkpoint in save_folder {s3_bucket}/run): '
                          f'{s3_bucket}/run/ep0-ba3-rank0.pt needs builtins.exec'), err
    assert not marker.exists()


@pytest.mark.s3
def test_a_remote_save_folder_with_checkpoints_but_no_pointer_is_named(s3_bucket: str, written: Path,
                                                                       capsys) -> None:
    """Composer would start over and fail at the end, unable to upload over the checkpoints; the runner names them."""
    for name in ('ep0-ba1-rank0.pt', 'ep0-ba2-rank0.pt'):
        _upload(f'{s3_bucket}/run/{name}', written / name)
    assert train_main([DIGITS, f'save_folder={s3_bucket}/run', 'run_name=r', 'autoresume=true']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: save_folder {s3_bucket}/run holds checkpoints (ep0-ba1-rank0.pt, ep0-ba2-rank0.pt) '
                          'but no latest-rank0.pt.symlink pointer to the latest'), err
    assert f'Resume with load_path={s3_bucket}/run/ep0-ba2-rank0.pt' in err and len(err.splitlines()) == 1
