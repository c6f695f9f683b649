"""composer-sampling audit: coverage per epoch from every rank's ledger along the lineage of the final model."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from composer.core import Callback, State
from composer.loggers import Logger
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync
from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import LedgerError, LedgerWriter, read_ledger
from composer_sampling.recipes.cli import main

from support.helpers import checkpoint, make_trainer, synthetic, train_with_ledger

SIZE = 50  # 7 batches of 8 an epoch


def loader() -> DataLoader:
    dataset = synthetic(SIZE)
    return DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))


def _crashed_and_resumed(tmp_path: Path) -> Path:
    """A run that reached batch 9 (epoch 1), 'crashed', and was resumed from its checkpoint at batch 5."""
    ledger, checkpoints = tmp_path / 'ledger', tmp_path / 'checkpoints'
    train_with_ledger(loader(), '9ba', folder=checkpoints, callbacks_extra=[SampleLedger(str(ledger))])
    train_with_ledger(loader(), '3ep', load=checkpoint(checkpoints, 5), callbacks_extra=[SampleLedger(str(ledger))])
    return ledger


def test_a_resumed_run_supersedes_what_the_crash_lost(tmp_path: Path, capsys) -> None:
    ledger = _crashed_and_resumed(tmp_path)
    report = audit_folder(ledger)
    assert [(e.epoch, e.exactly_once, e.repeated, e.missing, e.status) for e in report.epochs] == [
        (epoch, SIZE, 0, 0, 'ok') for epoch in range(3)]
    assert report.superseded == 8 + 2 + 8 + 8  # batches 6 and 7 (the short one) of epoch 0, 8 and 9 of epoch 1
    assert [a['start_batch'] for a in report.attempts] == [0, 5]
    assert main(['audit', str(tmp_path)]) == 0  # finds ledger/ under the save folder
    out = capsys.readouterr().out
    assert '26 samples trained after the checkpoint a resume started from were superseded' in out
    assert f'data fingerprint: {report.data_fingerprint}\n' in out


def test_the_ledger_knows_its_data_and_a_lineage_over_changed_data_is_refused(tmp_path: Path) -> None:
    """Every header records the train dataset's fingerprint; audit prints the lineage's. A resume onto other data
    (allowed by allow_data_change) leaves a lineage that audit refuses, naming both attempts and fingerprints."""
    from composer_sampling.recipes.demo.data import SyntheticDataset

    ledger = _crashed_and_resumed(tmp_path / 'same')
    report = audit_folder(ledger)
    assert re.fullmatch(r"[0-9a-f]{16}, from the SyntheticDataset's own fingerprint 'ten Gaussian clusters in 64 "
                        r"dimensions, seed 0, 50 samples'", report.data_fingerprint), report.data_fingerprint
    (digest,) = {read_ledger(path).header['data_fingerprint']['digest'] for path in ledger.glob('*.bin')}
    assert digest.startswith(report.data_fingerprint[:16])

    changed, checkpoints = tmp_path / 'changed' / 'ledger', tmp_path / 'changed' / 'checkpoints'
    train_with_ledger(loader(), '5ba', folder=checkpoints, callbacks_extra=[SampleLedger(str(changed))])
    other = SyntheticDataset(SIZE, seed=1)
    with pytest.warns(UserWarning, match='allow_data_change is true'):
        train_with_ledger(DataLoader(other, batch_size=8, sampler=ResumableDistributedSampler(other)), '2ep',
                          load=checkpoint(checkpoints, 5), sync=SamplerSync(allow_data_change=True),
                          callbacks_extra=[SampleLedger(str(changed))])
    attempts = sorted({read_ledger(path).header['attempt'] for path in changed.glob('*.bin')})
    with pytest.raises(LedgerError, match=r'trained on different data: attempt [0-9a-f]+ on dataset [0-9a-f]{16}, '
                                          r".*seed 0, 50 samples', attempt [0-9a-f]+ on [0-9a-f]{16}, .*seed 1, "
                                          r"50 samples'") as refused:
        audit_folder(changed)
    assert all(attempt in str(refused.value) for attempt in attempts)


def _rewrite(path: Path, **changes: object) -> None:
    """Write ``path`` again (a valid ledger with its checksum) with some header fields changed."""
    ledger = read_ledger(path)
    header, records = ledger.header, ledger.records
    header.pop('version')
    path.unlink()
    writer = LedgerWriter(path, {**header, **changes})
    for record in records:
        writer.append(record.epoch, record.batch, record.indices)
    writer.close()


def test_without_superseding_the_same_ledgers_would_show_repeats(tmp_path: Path) -> None:
    ledger = _crashed_and_resumed(tmp_path)
    # Rewrite the resumed attempt as if it had started at batch 9: nothing is superseded any more.
    (resumed,) = [path for path in ledger.glob('*.bin') if read_ledger(path).header['start_batch'] == 5]
    _rewrite(resumed, start_batch=9)
    report = audit_folder(ledger)
    assert report.epochs[0].repeated == 26 - 16 and report.epochs[0].status == 'VIOLATION'


def test_plot(tmp_path: Path) -> None:
    ledger = _crashed_and_resumed(tmp_path)
    assert main(['audit', str(ledger), '--plot', str(tmp_path / 'coverage.png')]) == 0
    assert (tmp_path / 'coverage.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def _header(**overrides) -> dict:
    return {'lineage': 'one', 'attempt': 'a1', 'resumed_from': None, 'started': 1.0, 'rank': 0, 'world_size': 1,
            'start_batch': 0, 'start_epoch': 0, 'dataset_len': 4, 'padded': 0, 'dropped': 0, 'sub_epochs_per_epoch': 1,
            **overrides}


def test_a_violation_exits_1(tmp_path: Path, capsys) -> None:
    writer = LedgerWriter(tmp_path / 'a1-rank0.bin', _header())
    writer.append(0, 1, [0, 1, 1, 2])  # 1 twice, 3 never
    writer.append(1, 2, [0, 1, 2, 3])
    writer.close()
    assert main(['audit', str(tmp_path)]) == 1
    assert 'FAILED guarantee: exactly once per epoch: epoch 0 repeats 1 and misses 1 samples' in capsys.readouterr().err


@pytest.mark.parametrize(
    ('setup', 'message'),
    [
        ('missing', 'is not a folder'),
        ('empty', 'nothing recorded: no ledger file in'),
        ('nothing', r'nothing recorded: the ledgers in .* hold no trained batch \(attempts a1 stopped before'),
        ('mixed', 'ledgers of different runs are mixed: a1-rank0.bin has dataset_len=4, b1-rank0.bin has '
                  'dataset_len=5, both of lineage one'),
        ('rank', r'attempt a1 ran on 2 ranks but only the ledgers of ranks \[0\]'),
        ('corrupted', 'is corrupted'),
    ],
)
def test_bad_input_exits_2(tmp_path: Path, capsys, setup: str, message: str) -> None:
    folder = tmp_path / 'run'
    if setup != 'missing':
        folder.mkdir()
    if setup == 'nothing':  # a header without records, as releases before this one left behind a crash
        LedgerWriter(folder / 'a1-rank0.bin', _header()).close()
    if setup in ('mixed', 'corrupted'):
        writer = LedgerWriter(folder / 'a1-rank0.bin', _header())
        writer.append(0, 1, [0, 1, 2, 3])
        writer.close()
    if setup == 'mixed':
        LedgerWriter(folder / 'b1-rank0.bin', _header(dataset_len=5, attempt='b1')).close()
    if setup == 'rank':
        LedgerWriter(folder / 'a1-rank0.bin', _header(world_size=2)).close()
    if setup == 'corrupted':
        path = folder / 'a1-rank0.bin'
        data = bytearray(path.read_bytes())
        data[-10] ^= 0x01
        path.write_bytes(bytes(data))
    assert main(['audit', str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and len(err.splitlines()) == 1
    assert re.search(message, err), err


#: The schemes Composer has an object store for (maybe_create_object_store_from_uri): audit reads those.
COMPOSER_SCHEMES = {'s3', 'gs', 'oci', 'azure', 'dbfs'}


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheme=st.sampled_from(['https', 'hf', 'wandb']) | st.from_regex(r'[a-z][a-z0-9+.-]{1,9}', fullmatch=True)
       .filter(lambda scheme: scheme not in COMPOSER_SCHEMES))
def test_a_uri_composer_cannot_read_is_refused_naming_its_scheme_and_never_read_as_a_local_folder(
        tmp_path: Path, monkeypatch, capsys, scheme: str) -> None:
    """Path('hf://bucket/run') is hf:/bucket/run: a stale local folder of that name must not be audited instead."""
    monkeypatch.chdir(tmp_path)
    stale = Path(f'{scheme}:') / 'bucket' / 'run' / 'ledger'
    stale.mkdir(parents=True, exist_ok=True)
    if not (stale / 'a1-rank0.bin').exists():
        writer = LedgerWriter(stale / 'a1-rank0.bin', _header())
        writer.append(0, 1, [0, 1, 2, 3])
        writer.close()
    uri = f'{scheme}://bucket/run'
    assert main(['audit', uri]) == 2
    assert capsys.readouterr().err.startswith(f'error: {uri}: Composer has no object store for {scheme}://')
    with pytest.raises(LedgerError, match=re.escape(f'Composer has no object store for {scheme}://')):
        audit_folder(uri)
    with pytest.raises(LedgerError, match=re.escape(f'looks like a URI ({scheme}:) whose "//" was lost')):
        audit_folder(Path(uri))
    assert [e.status for e in audit_folder(tmp_path / stale.parent).epochs] == ['ok']  # the stale folder is a good run


# ---------------------------------------------------------------------------------------------------------------
# audit of a URI: the ledger objects downloaded through Composer's object store, audited as a local folder

DIGITS = str(Path(__file__).resolve().parents[2] / 'yamls' / 'digits.yaml')


@pytest.fixture(scope='module')
def two_lineages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A save folder with two lineages: a run, then a save_overwrite rerun whose checkpoint is the final one."""
    folder = tmp_path_factory.mktemp('remote-audit') / 'run'
    common = ['train', DIGITS, 'train_loader.dataset={name: synthetic, size: 200}', 'callbacks.sample_ledger={}',
              f'save_folder={folder}', 'save_interval=1ba']
    assert main([*common, 'max_duration=3ba']) == 0
    assert main([*common, 'max_duration=2ba', 'save_overwrite=true', 'seed=5']) == 0
    return folder


def _upload_folder(folder: Path, uri: str, scratch: Path) -> None:
    """Every file under ``folder`` to ``uri`` through Composer's own object store, laid out as Composer uploads a
    save folder: a symbolic link (``latest-rank0.pt``) becomes a ``.symlink`` object holding its target's name."""
    from composer.utils import maybe_create_object_store_from_uri, parse_uri

    store = maybe_create_object_store_from_uri(uri)
    assert store is not None
    key = parse_uri(uri)[2]
    for path in sorted(folder.rglob('*')):
        name = f'{key}/{path.relative_to(folder)}'
        if path.is_symlink():
            pointer = scratch / 'pointer.symlink'
            pointer.write_text(f'{key}/{path.resolve().relative_to(folder.resolve())}')
            store.upload_object(f'{name}.symlink', pointer)
        elif path.is_file():
            store.upload_object(name, path)


@pytest.mark.s3
def test_audit_of_a_bucket_equals_the_audit_of_the_local_folder(two_lineages: Path, s3_bucket: str, tmp_path: Path,
                                                                capsys) -> None:
    uri = f'{s3_bucket}/runs/digits'
    assert (two_lineages / 'latest-rank0.pt').is_symlink()
    _upload_folder(two_lineages, uri, tmp_path)
    local, remote = audit_folder(two_lineages), audit_folder(uri)
    assert len(local.other_lineages) == 1 and local.chosen.startswith('the lineage of the final checkpoint')
    assert remote.chosen == local.chosen.replace(str(two_lineages), uri)  # the same final checkpoint, downloaded
    for name in ('lineage_id', 'epochs', 'attempts', 'per_rank', 'other_lineages', 'superseded', 'abandoned', 'torn'):
        assert getattr(remote, name) == getattr(local, name), name
    assert main(['audit', str(two_lineages)]) == 0
    printed = capsys.readouterr().out
    assert main(['audit', uri]) == 0
    assert capsys.readouterr().out == printed.replace(str(two_lineages), uri)


@pytest.mark.s3
def test_audit_at_the_bucket_root_names_the_folders_below_it_that_hold_a_ledger(s3_bucket: str, tmp_path: Path,
                                                                               capsys) -> None:
    runs = tmp_path / 'runs'
    for number in range(12):  # run 0 keeps its ledger in ledger/, the others beside their checkpoints
        folder = runs / f'run{number:02}' / ('ledger' if number == 0 else '')
        folder.mkdir(parents=True)
        LedgerWriter(folder / 'a1-rank0.bin', _header()).append(0, 1, [0, 1, 2, 3])
    (runs / 'notes.txt').write_text('not a run')
    _upload_folder(runs, f'{s3_bucket}/runs', tmp_path)
    assert main(['audit', s3_bucket]) == 2
    err = capsys.readouterr().err
    shown = ', '.join(f'{s3_bucket}/runs/run{number:02}' for number in range(10))
    assert (f'error: nothing recorded: no ledger file in {s3_bucket} or {s3_bucket}/ledger (it holds 13 other '
            f'objects): the folders below it that hold ledger files are {shown} and 2 more; audit one of them') in err
    assert main(['audit', f'{s3_bucket}/runs/run00']) == 0


@pytest.mark.s3
def test_audit_of_an_s3_uri_reads_it_without_importing_composer(s3_bucket: str, tmp_path: Path) -> None:
    folder = tmp_path / 'run' / 'ledger'
    folder.mkdir(parents=True)
    LedgerWriter(folder / 'a1-rank0.bin', _header()).append(0, 1, [0, 1, 2, 3])
    _upload_folder(tmp_path / 'run', f'{s3_bucket}/run', tmp_path)
    code = ('import sys; from composer_sampling.recipes.cli import main; '
            f'code = main(["audit", "{s3_bucket}/run"]); print("composer imported:", "composer" in sys.modules); '
            'sys.exit(code)')
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(root), os.environ.get('PYTHONPATH')]))}
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 'composer imported: False' in done.stdout and '| ok ' in done.stdout


def _stopped_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.s3_server import free_loopback_ports

    monkeypatch.setenv('S3_ENDPOINT_URL', f'http://127.0.0.1:{free_loopback_ports(1)[0]}')  # nothing listens there


@pytest.mark.s3
@pytest.mark.parametrize(('case', 'message'), [
    ('missing bucket', "the bucket 'no-such-bucket-here' does not exist at this endpoint; check the bucket name"),
    ('empty prefix', 'no object under this prefix (the bucket exists); check the path'),
    ('bad credentials', 'the object store refuses the credentials (SignatureDoesNotMatch); check the credentials'),
    ('no credentials', 'no credentials were found for the object store (NoCredentialsError); set AWS_ACCESS_KEY_ID'),
    ('server stopped', 'the object store does not answer (Could not connect to the endpoint URL'),
])
def test_audit_of_a_uri_that_cannot_be_read_is_a_named_error(case: str, message: str, s3_bucket: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    uri = 's3://no-such-bucket-here/run' if case == 'missing bucket' else f'{s3_bucket}/run'
    if case == 'bad credentials':
        monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'not-the-key')
    if case == 'no credentials':  # the s3_bucket fixture already shuts out the user's AWS files
        for name in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'):
            monkeypatch.delenv(name)
    if case == 'server stopped':
        _stopped_server(monkeypatch)
    monkeypatch.chdir(tmp_path)  # a stale local folder named like the URI is never read instead
    stale = Path(str(Path(uri))) / 'ledger'
    stale.mkdir(parents=True)
    LedgerWriter(stale / 'a1-rank0.bin', _header()).append(0, 1, [0, 1, 2, 3])
    assert main(['audit', uri]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: {uri}') and message in err and len(err.splitlines()) == 1, err


def test_unknown_arguments_are_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(['audit', 'folder', 'extra=1'])
    assert exit_info.value.code == 2


LONG = 160  # 20 batches of 8 an epoch: checkpoints ep0-ba10, ep0-ba20, ep1-ba30, ep1-ba40


class DiesBeforeItsFirstBatch(Callback):
    """A host that goes away after the fit started and before the first batch trained."""

    def batch_start(self, state: State, logger: Logger) -> None:
        raise RuntimeError('the host went away')


def _fit(ledger: Path, duration: str, *, save: Path | None = None, load: Path | None = None,
         extra: tuple[Callback, ...] = ()) -> None:
    dataset = synthetic(LONG)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    make_trainer(loader, max_duration=duration, callbacks=[SamplerSync(), SampleLedger(str(ledger)), *extra],
                 save_folder=None if save is None else str(save), save_interval='10ba',
                 load_path=None if load is None else str(load)).fit()


def _attempts_by_start(ledger: Path) -> dict[int, str]:
    return {read.header['start_batch']: read.header['attempt'] for read in map(read_ledger, ledger.glob('*.bin'))}


@pytest.fixture(scope='module')
def main_line(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """2 epochs with a ledger and a checkpoint every 10 batches: the ledger folder and the save folder."""
    root = tmp_path_factory.mktemp('main')
    _fit(root / 'ledger', '2ep', save=root / 'main')
    return root / 'ledger', root / 'main'


@pytest.fixture(scope='module')
def side_branch(main_line: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main line; a branch resumed from ep0-ba10 into another save folder for 2 batches; the main line
    resumed from ep1-ba30 to the end. The ledger folder holds all three attempts."""
    ledger, main = main_line
    root = tmp_path_factory.mktemp('side')
    shutil.copytree(ledger, root / 'ledger')
    _fit(root / 'ledger', '12ba', save=root / 'side', load=main / 'ep0-ba10-rank0.pt')
    _fit(root / 'ledger', '2ep', load=main / 'ep1-ba30-rank0.pt')
    return root / 'ledger'


def test_an_abandoned_side_branch_does_not_erase_the_main_line(side_branch: Path, capsys) -> None:
    report = audit_folder(side_branch)
    assert [(e.epoch, e.exactly_once, e.repeated, e.missing, e.status) for e in report.epochs] == [
        (0, LONG, 0, 0, 'ok'), (1, LONG, 0, 0, 'ok')]
    ids = _attempts_by_start(side_branch)
    assert report.lineage == [ids[0], ids[30]]
    assert [(b['attempt'], b['trained'], b['samples']) for b in report.abandoned] == [(ids[10], 'batches 11-12', 16)]
    assert report.superseded == 10 * 8  # the first attempt's batches 31-40, trained again by the resume
    assert main(['audit', str(side_branch)]) == 0
    out = capsys.readouterr().out
    assert f'attempts counted, from the fresh start: {ids[0]} -> {ids[30]}' in out
    assert f'lineage counted: {report.lineage_id} (the only lineage in the folder)' in out
    # An attempt id never appears on a line that speaks of a lineage.
    assert not any(line.startswith('lineage') and ids[0] in line for line in out.splitlines())
    assert (f'abandoned branch {ids[10]}: resumed from {ids[0]} at batch 10, trained batches 11-12 (16 samples); '
            'not counted') in out


def test_the_console_script_lists_the_abandoned_branch(side_branch: Path) -> None:
    result = subprocess.run([str(Path(sys.executable).parent / 'composer-sampling'), 'audit', str(side_branch)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f'abandoned branch {_attempts_by_start(side_branch)[10]}: resumed from' in result.stdout
    assert 'VIOLATION' not in result.stdout


def test_the_clocks_of_the_hosts_do_not_change_the_verdict(side_branch: Path, tmp_path: Path) -> None:
    expected = audit_folder(side_branch)
    ledger = Path(shutil.copytree(side_branch, tmp_path / 'ledger'))
    # Every attempt ran on a host whose clock is further behind than the last one's: start times and file
    # modification times come out in the reverse order of what happened.
    for path in ledger.glob('*.bin'):
        header = read_ledger(path).header
        _rewrite(path, started=-header['started'])
        os.utime(path, (2e9 - header['started'], 2e9 - header['started']))
    report = audit_folder(ledger)
    assert (report.epochs, report.lineage, report.abandoned, report.superseded) == (
        expected.epochs, expected.lineage, expected.abandoned, expected.superseded)


def test_a_resume_that_dies_before_its_first_batch_erases_nothing(main_line: tuple[Path, Path],
                                                                   tmp_path: Path) -> None:
    ledger = Path(shutil.copytree(main_line[0], tmp_path / 'ledger'))
    with pytest.raises(RuntimeError, match='the host went away'):
        _fit(ledger, '2ep', load=main_line[1] / 'ep0-ba10-rank0.pt', extra=(DiesBeforeItsFirstBatch(),))
    report = audit_folder(ledger)
    assert [e.status for e in report.epochs] == ['ok', 'ok'] and report.superseded == 0
    assert sorted(path.name for path in ledger.iterdir()) == sorted(path.name for path in main_line[0].iterdir()), \
        'an attempt that trained no batch leaves no file'
    assert report.abandoned == []


def test_a_checkpoint_without_the_attempt_id_still_resumes(main_line: tuple[Path, Path], tmp_path: Path) -> None:
    ledger = Path(shutil.copytree(main_line[0], tmp_path / 'ledger'))
    state = torch.load(main_line[1] / 'ep0-ba10-rank0.pt', weights_only=False)
    assert state['state']['callbacks']['SampleLedger']['batch'] == 10
    state['state']['callbacks']['SampleLedger'] = {'lineage': state['state']['callbacks']['SampleLedger']['lineage']}
    torch.save(state, tmp_path / 'older.pt')  # as written before the attempt id was recorded
    _fit(ledger, '12ba', load=tmp_path / 'older.pt')
    (resumed,) = [read.header for read in map(read_ledger, ledger.glob('*.bin')) if read.header['start_batch'] == 10]
    assert resumed['resumed_from'] is None
    report = audit_folder(ledger)  # the main line trained further: the unlinked attempt is listed, not counted
    assert [b['origin'] for b in report.abandoned] == ['started at batch 10']
    assert [e.status for e in report.epochs] == ['ok', 'ok']


def _write(folder: Path, attempt: str, records: list[tuple[int, int, list[int]]], **header: object) -> Path:
    path = folder / f'{attempt}-rank0.bin'
    writer = LedgerWriter(path, _header(attempt=attempt, **header))
    for epoch, batch, indices in records:
        writer.append(epoch, batch, indices)
    writer.close()
    return path


def test_a_tie_between_branches_goes_to_the_one_written_last(tmp_path: Path, capsys) -> None:
    # dataset_len 4, 2 batches of 2 an epoch; b1 and c1 both resume from a1 at batch 2 and reach batch 4.
    _write(tmp_path, 'a1', [(0, 1, [0, 1]), (0, 2, [2, 3]), (1, 3, [3, 0]), (1, 4, [1, 2])])
    later = {}
    for attempt in ('b1', 'c1'):
        later[attempt] = _write(tmp_path, attempt, [(1, 3, [1, 2]), (1, 4, [3, 0])], start_batch=2,
                                resumed_from={'attempt': 'a1', 'batch': 2})
    for written_last, other in (('b1', 'c1'), ('c1', 'b1')):
        os.utime(later[written_last], (3e9, 3e9))
        os.utime(later[other], (2e9, 2e9))
        report = audit_folder(tmp_path)
        assert report.lineage == ['a1', written_last]
        assert [b['attempt'] for b in report.abandoned] == [other]
        assert report.tie == (f'branches {written_last} and {other} both reached batch 4; counted {written_last}, '
                              'whose ledger files were written last')
    assert main(['audit', str(tmp_path)]) == 0
    assert 'tie: branches c1 and b1 both reached batch 4' in capsys.readouterr().out


@pytest.mark.parametrize(
    ('setup', 'message'),
    [
        ('orphan', 'attempt b1 resumed at batch 2 from attempt gone, whose ledgers are not in this folder'),
        ('unnamed', 'attempt b1 started at batch 2 from a checkpoint that names no attempt'),
        ('gap', 'attempt b1 resumed at batch 2 from attempt a1, whose rank 0 ledger ends at batch 1: the records '
                'in between are missing'),
        ('edited', 'is corrupted: its header fails its checksum'),
        ('index', r'the record of batch 2 \(byte \d+\) holds index 7, outside \[0, 4\)'),
    ],
)
def test_a_lineage_with_a_gap_or_a_damaged_ledger_exits_2(tmp_path: Path, capsys, setup: str, message: str) -> None:
    resumed = {'start_batch': 2, 'resumed_from': {'attempt': 'a1', 'batch': 2}}
    if setup == 'orphan':
        _write(tmp_path, 'b1', [(1, 3, [0, 1])], **{**resumed, 'resumed_from': {'attempt': 'gone', 'batch': 2}})
    if setup == 'unnamed':
        _write(tmp_path, 'b1', [(1, 3, [0, 1])], **{**resumed, 'resumed_from': None})
    if setup == 'gap':
        _write(tmp_path, 'a1', [(0, 1, [0, 1])])
        _write(tmp_path, 'b1', [(0, 3, [2, 3])], **resumed)
    if setup == 'edited':  # the same length of header text, another dataset_len
        path = _write(tmp_path, 'a1', [(0, 1, [0, 1, 2, 3])])
        path.write_bytes(path.read_bytes().replace(b'"dataset_len": 4', b'"dataset_len": 5'))
    if setup == 'index':
        _write(tmp_path, 'a1', [(0, 1, [0, 1]), (0, 2, [2, 7])])
    assert main(['audit', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and len(err.splitlines()) == 1
    assert re.search(message, err), err


@pytest.mark.parametrize(
    ('changes', 'message'),
    [
        ({'replication': 0}, 'has replication=0 in its header; it must be an int >= 1'),
        ({'replication': 'two'}, "has replication='two' in its header; it must be an int >= 1"),
        ({'padded': None}, 'has padded=None in its header; it must be an int >= 0'),
        ({'dropped': -1}, 'has dropped=-1 in its header; it must be an int >= 0'),
        ({'world_size': None}, 'has world_size=None in its header; it must be an int >= 1'),
        ({'attempt': 5}, 'has attempt=5 in its header; it must be a str'),
        ({'world_size': 2**40}, rf'attempt a1 ran on {2**40} ranks but only the ledgers of ranks \[0\] are in'),
        ({'dataset_len': 2**62}, rf'dataset_len={2**62} in the headers of attempt a1: audit counts an epoch in 2 bits '
                                 rf'per sample, {2**60} bytes, more than the \d+ bytes of memory of this machine'),
    ],
)
def test_a_forged_header_with_a_valid_checksum_is_a_named_error(tmp_path: Path, capsys, changes: dict,
                                                                message: str) -> None:
    writer = LedgerWriter(tmp_path / 'a1-rank0.bin', _header(**changes))
    writer.append(0, 1, [0, 1, 2, 3])
    writer.close()
    assert main(['audit', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and len(err.splitlines()) == 1
    assert re.search(message, err), err


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dataset_len=st.integers(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') * 4 + 8, 2**63 - 1),
       world_size=st.integers(1, 5), ledger_folder=st.booleans())
def test_a_forged_dataset_len_names_the_ledger_files_it_is_in(tmp_path_factory: pytest.TempPathFactory, capsys,
                                                              dataset_len: int, world_size: int,
                                                              ledger_folder: bool) -> None:
    """A dataset_len whose count would not fit in memory is named with the files whose headers hold it."""
    run = tmp_path_factory.mktemp('forged')
    folder = run / 'ledger' if ledger_folder else run
    folder.mkdir(exist_ok=True)
    for rank in range(world_size):
        writer = LedgerWriter(folder / f'a1-rank{rank}.bin',
                              _header(dataset_len=dataset_len, rank=rank, world_size=world_size))
        writer.append(0, 1, [rank])
        writer.close()
    assert main(['audit', str(run)]) == 2
    err = capsys.readouterr().err
    files = ', '.join(str(folder / f'a1-rank{rank}.bin') for rank in range(min(world_size, 3)))
    more = f' and {world_size - 3} more' if world_size > 3 else ''
    assert err.startswith(f'error: dataset_len={dataset_len} in the headers of attempt a1: ') and \
        f'check the header of {files}{more}, which may be forged or damaged' in err, err


def test_a_directory_a_dangling_link_or_a_fifo_named_bin_is_skipped_and_never_waited_on(tmp_path: Path,
                                                                                         capsys) -> None:
    import threading

    folder = tmp_path / 'ledger'
    folder.mkdir()
    (folder / 'dir.bin').mkdir()
    (folder / 'gone.bin').symlink_to(tmp_path / 'absent.bin')
    os.mkfifo(folder / 'pipe.bin')
    outcome: list[object] = []

    def audit(argv: list[str]) -> None:
        outcome.append(main(argv))

    for expected in (2, 0):  # nothing else in the folder; then beside a good ledger
        outcome.clear()
        thread = threading.Thread(target=audit, args=(['audit', str(folder)],), daemon=True)
        thread.start()
        thread.join(60)
        if thread.is_alive():  # unblock the reader so that the test ends, and fail
            os.close(os.open(folder / 'pipe.bin', os.O_WRONLY | os.O_NONBLOCK))
            thread.join(10)
            pytest.fail('audit waited on a FIFO named pipe.bin for a writer')
        assert outcome == [expected]
        captured = capsys.readouterr()
        for name, kind in (('dir.bin', 'a directory'), ('gone.bin', 'a dangling symbolic link'),
                           ('pipe.bin', 'a FIFO')):
            assert f'{folder / name} is {kind}, not a ledger file' in captured.out + captured.err
        if expected == 0:
            break
        writer = LedgerWriter(folder / 'a1-rank0.bin', _header())
        writer.append(0, 1, [0, 1, 2, 3])
        writer.close()
    with pytest.raises(LedgerError, match=re.escape(f'{folder / "pipe.bin"} is a FIFO, not a ledger file')):
        read_ledger(folder / 'pipe.bin')


def test_without_a_checkpoint_the_lineage_written_last_is_counted_and_the_others_listed(tmp_path: Path,
                                                                                        capsys) -> None:
    older = _write(tmp_path, 'a1', [(0, 1, [0, 1, 2, 3])], lineage='one')
    newer = _write(tmp_path, 'b1', [(0, 1, [3, 2, 1, 0]), (1, 2, [0, 1])], lineage='two')
    _write(tmp_path, 'c1', [], lineage='three')  # a header only, as older releases left a fit that trained nothing
    for path, when in ((older, 2e9), (newer, 3e9), (tmp_path / 'c1-rank0.bin', 4e9)):
        os.utime(path, (when, when))
    report = audit_folder(tmp_path)
    assert report.lineage_id == 'two' and report.lineage == ['b1']
    assert report.chosen == f'the lineage whose ledger files were written last (no checkpoint in {tmp_path})'
    assert [(other['lineage'], other['samples']) for other in report.other_lineages] == [('one', 4), ('three', 0)]
    assert main(['audit', str(tmp_path), '--lineage', 'o']) == 0
    out = capsys.readouterr().out
    assert 'lineage counted: one (as asked)' in out
    assert 'attempts counted, from the fresh start: a1' in out
    assert main(['audit', str(tmp_path), '--lineage', 't']) == 2
    assert capsys.readouterr().err == (f'error: --lineage t names more than one lineage of the ledgers in {tmp_path}; '
                                       'they are: one, three, two\n')


def test_audit_starts_without_torch() -> None:
    # torch's import is seconds and hundreds of MiB: reading ledgers needs none of it
    code = 'import sys, composer_sampling.audit, composer_sampling.recipes.cli; assert "torch" not in sys.modules'
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, '-c', code], check=True, env={**os.environ, 'PYTHONPATH': root})
