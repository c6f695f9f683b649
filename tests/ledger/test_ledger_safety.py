"""A ledger is never lost, and cannot be fooled: the cases a new user ran into.

A refused rerun leaves the finished run's ledger as it was; run names fill the
save folder's placeholders; a torn last record is reported, not fatal; other
files in a save folder do not hide its ledger; a key that selects the labels
stops the run at its first batch.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync
from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import read_ledger
from composer_sampling.recipes.cli import main
from composer_sampling.recipes.schema import RecipeError, load_recipe

from support.helpers import make_trainer, synthetic


def _loader(size: int = 40) -> DataLoader:
    dataset = synthetic(size)
    return DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))


def _run(save_folder: str, *, ledger: SampleLedger | None = None, **kwargs: Any) -> Any:
    trainer = make_trainer(_loader(), max_duration='2ep', save_folder=save_folder, save_interval='1ep',
                           callbacks=[SamplerSync(), ledger or SampleLedger()], **kwargs)
    trainer.fit()
    return trainer


def test_a_refused_rerun_into_a_finished_runs_folder_leaves_its_ledger_auditable(tmp_path: Path, capsys) -> None:
    _run(str(tmp_path))
    before = sorted(path.name for path in (tmp_path / 'ledger').iterdir())
    with pytest.raises(FileExistsError):  # Composer refuses: no save_overwrite
        _run(str(tmp_path))
    assert sorted(path.name for path in (tmp_path / 'ledger').iterdir()) == before
    assert main(['audit', str(tmp_path)]) == 0
    assert '| ok ' in capsys.readouterr().out


def test_the_save_folders_placeholders_are_filled_as_composer_fills_them(tmp_path: Path) -> None:
    for name in ('first', 'second'):
        _run(str(tmp_path / '{run_name}' / 'node{node_rank}'), run_name=name)
        report = audit_folder(tmp_path / name / 'node0')
        assert [epoch.status for epoch in report.epochs] == ['ok', 'ok']
    assert not (tmp_path / '{run_name}').exists()


def test_a_torn_last_record_is_reported_and_what_precedes_it_audited(tmp_path: Path, capsys) -> None:
    _run(str(tmp_path))
    (path,) = (tmp_path / 'ledger').glob('*-rank0.bin')
    path.write_bytes(path.read_bytes()[:-5])
    assert main(['audit', str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r'torn record: .*rank0\.bin: the last record \(batch 10, 8 samples\) is torn: .* so its 8 '
                     r'samples could not be read; the records before it are counted', out), out
    assert 'partial (run ended at batch 9)' in out


def test_other_bin_files_in_a_save_folder_do_not_hide_its_ledger(tmp_path: Path) -> None:
    _run(str(tmp_path))
    torch.save({'weights': torch.zeros(2)}, tmp_path / 'pytorch_model.bin')
    assert [epoch.status for epoch in audit_folder(tmp_path).epochs] == ['ok', 'ok']


def test_no_folder_or_an_unreachable_remote_one_is_refused_before_training(tmp_path: Path, monkeypatch) -> None:
    """A remote folder is staged and uploaded (test_ledger_upload.py); one out of reach stops the fit at its start."""
    monkeypatch.chdir(tmp_path)  # were the URI taken for a local path, s3:/bucket/run/ledger would appear here
    for name in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_PROFILE', 'AWS_SESSION_TOKEN'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', str(tmp_path / 'absent'))
    monkeypatch.setenv('AWS_CONFIG_FILE', str(tmp_path / 'absent'))
    monkeypatch.setenv('AWS_EC2_METADATA_DISABLED', 'true')  # no credentials anywhere: nothing leaves the machine
    trainer = make_trainer(_loader(), callbacks=[SampleLedger('s3://bucket/run/ledger')])
    with pytest.raises(ValueError, match=r'SampleLedger cannot reach its ledger folder s3://bucket/run/ledger: no '
                                         r'credentials were found for the object store \(NoCredentialsError\); set '
                                         r'AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY'):
        trainer.fit()
    assert trainer.state.timestamp.batch == 0
    with pytest.raises(ValueError, match=r'SampleLedger has no folder: give the Trainer a save_folder'):
        make_trainer(_loader(), callbacks=[SampleLedger()]).fit()
    assert list(tmp_path.iterdir()) == []


def test_plan_takes_a_ledger_in_a_remote_save_folder_it_can_list(tmp_path: Path, monkeypatch, capsys) -> None:
    """``train`` stages the ledger and uploads it (test_ledger_upload.py). ``plan`` lists the remote save folder as
    ``train`` does, to see what an earlier run left there: a store it cannot reach is named; no local s3: appears."""
    monkeypatch.chdir(tmp_path)
    for variable in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_PROFILE', 'S3_ENDPOINT_URL'):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', str(tmp_path / 'none'))
    monkeypatch.setenv('AWS_CONFIG_FILE', str(tmp_path / 'none'))
    recipe = str(Path(__file__).resolve().parents[2] / 'yamls' / 'digits.yaml')
    assert main(['plan', recipe, 'max_duration=2ba', 'save_folder=s3://bucket/{run_name}', 'run_name=r',
                 'callbacks.sample_ledger={}']) == 2
    assert capsys.readouterr().err.startswith('error: save_folder: s3://bucket/r: ')
    assert list(tmp_path.iterdir()) == []


def test_an_index_key_that_selects_the_labels_stops_the_first_batch(tmp_path: Path) -> None:
    trainer = make_trainer(_loader(), callbacks=[SamplerSync(), SampleLedger(str(tmp_path), index_key='target')])
    with pytest.raises(ValueError, match=r"SampleLedger\(index_key='target'\) read \[.*\] from the first batch, but "
                                         r'the sampler graph handed the DataLoader \[.*\]: index_key must select the '
                                         r'dataset index of each sample \(not the labels\)'):
        trainer.fit()
    assert trainer.state.timestamp.batch == 1
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_the_batch_is_matched_to_its_indices_with_workers_and_a_cut_epoch(tmp_path: Path) -> None:
    """Workers fetch index lists ahead; Composer's cut leaves some untrained: neither is recorded."""
    dataset = synthetic(64)
    loader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2)
    ledger = SampleLedger(str(tmp_path))
    from support.helpers import IndexLedger

    seen = IndexLedger()
    make_trainer(loader, max_duration='3ep', train_subset_num_batches=5,
                 callbacks=[SamplerSync(), ledger, seen]).fit()
    (path,) = tmp_path.glob('*-rank0.bin')
    assert [(r.epoch, r.indices.tolist()) for r in read_ledger(path).records] == seen.batches


def test_a_resumed_run_of_torchs_sampler_records_whole_batches(tmp_path: Path) -> None:
    """SamplerSync's window and the ledger share one tap on BatchSampler.sampler, whichever comes first."""
    from torch.utils.data import DistributedSampler

    def loader() -> DataLoader:
        dataset = synthetic(40)
        return DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))

    ledger = str(tmp_path / 'ledger')
    make_trainer(loader(), max_duration='2ep', save_folder=str(tmp_path), save_interval='3ba',
                 callbacks=[SamplerSync(), SampleLedger(ledger)]).fit()
    for order in ((SamplerSync(), SampleLedger(ledger)), (SampleLedger(ledger), SamplerSync())):
        make_trainer(loader(), max_duration='2ep', load_path=str(tmp_path / 'ep0-ba3-rank0.pt'),
                     callbacks=list(order)).fit()
    report = audit_folder(tmp_path)
    assert [(epoch.exactly_once, epoch.status) for epoch in report.epochs] == [(40, 'ok')] * 2
    for path in (tmp_path / 'ledger').glob('*.bin'):
        assert {len(record.indices) for record in read_ledger(path).trained} == {8}


def test_a_dataloader_that_returns_batches_out_of_order_is_refused(tmp_path: Path) -> None:
    dataset = synthetic(16)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, in_order=False)
    with pytest.raises(ValueError, match='SampleLedger needs the DataLoader to return batches in the order of its '
                                         'index lists; build it with in_order=True'):
        make_trainer(loader, callbacks=[SamplerSync(), SampleLedger(str(tmp_path))]).fit()


def _fresh_run(save_folder: Path, size: int, **kwargs: Any) -> None:
    dataset = synthetic(size)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    make_trainer(loader, max_duration='2ep', save_folder=str(save_folder), save_interval='1ep',
                 callbacks=[SamplerSync(), SampleLedger()], **kwargs).fit()


def _lineages(folder: Path) -> dict[int, str]:
    """The lineage of each dataset length recorded in ``folder``."""
    return {read.header['dataset_len']: read.header['lineage'] for read in map(read_ledger, folder.glob('*.bin'))}


def test_a_save_overwrite_rerun_is_a_new_lineage_and_the_finished_one_stays_auditable(tmp_path: Path,
                                                                                      capsys) -> None:
    _fresh_run(tmp_path, 40)
    _fresh_run(tmp_path, 32, save_overwrite=True)  # the same folder, another dataset: a new run
    lineages = _lineages(tmp_path / 'ledger')
    assert len(set(lineages.values())) == 2
    for path in (tmp_path / 'ledger').glob('*.bin'):  # the clock must not decide: the first run's files look newest
        if read_ledger(path).header['lineage'] == lineages[40]:
            os.utime(path, (4e9, 4e9))
    report = audit_folder(tmp_path)
    assert (report.lineage_id, report.dataset_len) == (lineages[32], 32)
    assert report.chosen == f'the lineage of the final checkpoint {tmp_path / "latest-rank0.pt"}'
    assert [(e.exactly_once, e.status) for e in report.epochs] == [(32, 'ok')] * 2
    assert [(other['lineage'], other['samples']) for other in report.other_lineages] == [(lineages[40], 80)]
    assert main(['audit', str(tmp_path)]) == 0
    assert (f'other lineage {lineages[40]} (run ' in capsys.readouterr().out)
    earlier = audit_folder(tmp_path, lineage=lineages[40][:6])
    assert [(e.exactly_once, e.status) for e in earlier.epochs] == [(40, 'ok')] * 2
    assert main(['audit', str(tmp_path), '--lineage', lineages[40]]) == 0


def test_a_second_fit_on_another_dataloader_starts_a_new_lineage(tmp_path: Path) -> None:
    def loader(size: int) -> DataLoader:
        dataset = synthetic(size)
        return DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))

    trainer = make_trainer(loader(40), max_duration='1ep', save_folder=str(tmp_path), save_interval='1ep',
                           callbacks=[SamplerSync(), SampleLedger()])
    trainer.fit()
    trainer.fit(train_dataloader=loader(24), duration='1ep')
    lineages = _lineages(tmp_path / 'ledger')
    second = audit_folder(tmp_path)
    assert (second.lineage_id, second.dataset_len) == (lineages[24], 24)
    assert [(e.epoch, e.exactly_once, e.status) for e in second.epochs] == [(1, 24, 'ok')]
    first = audit_folder(tmp_path, lineage=lineages[40])
    assert [(e.epoch, e.exactly_once, e.status) for e in first.epochs] == [(0, 40, 'ok')]
    assert [other['lineage'] for other in first.other_lineages] == [lineages[24]]


def test_two_sample_ledgers_on_one_trainer_are_refused_at_construction(tmp_path: Path, capsys) -> None:
    first, second = SampleLedger(str(tmp_path / 'a')), SampleLedger(str(tmp_path / 'b'))
    with pytest.raises(ValueError, match=re.escape(
            f'a Trainer records one ledger, and it has 2 SampleLedger callbacks: {first!r} and {second!r}; keep one')):
        make_trainer(_loader(), callbacks=[first, SamplerSync(), second])
    recipe = str(Path(__file__).resolve().parents[2] / 'yamls' / 'digits.yaml')
    by_target = "callbacks.again={target: 'composer_sampling:SampleLedger'}"  # known once imported: train only
    for command, again in (('plan', 'callbacks.again={name: sample_ledger}'),
                           ('train', 'callbacks.again={name: sample_ledger}'), ('train', by_target)):
        assert main([command, recipe, f'save_folder={tmp_path}', 'callbacks.sample_ledger={}', again]) == 2
        assert capsys.readouterr().err == ('error: callbacks.sample_ledger and callbacks.again each record a ledger; '
                                           'a run records one (SampleLedger refuses a second on one Trainer): keep '
                                           'one\n')
    assert list(tmp_path.iterdir()) == []
def test_a_recipe_with_two_sampler_syncs_is_refused_with_the_callbacks_message(tmp_path: Path) -> None:
    """SamplerSync refuses a second instance of itself when the Trainer is built; the runner turns it into a
    RecipeError, which the CLI prints without a traceback."""
    from composer_sampling.recipes.runner import train

    recipe = str(Path(__file__).resolve().parents[2] / 'yamls' / 'digits.yaml')
    with pytest.raises(RecipeError, match=re.escape('the Trainer has 2 SamplerSync callbacks (SamplerSync(')):
        train(load_recipe(recipe, [f'save_folder={tmp_path}', 'callbacks.again={name: sampler_sync}']))


