"""composer-sampling inside llm-foundry 0.22, driven by llm-foundry's own ``train_from_yaml``, offline.

The YAMLs name our callbacks by the names llm-foundry's registry finds through our
entry points (``sampler_sync``, ``sample_ledger``). Data, tokenizer and model are
made here (``tests/support/llmfoundry_parts.py``): a text stream (pretraining, a
``StreamingDataset``) and a JSONL (finetuning, torch's ``DistributedSampler``
under llm-foundry's ``replication``).
"""

from __future__ import annotations

import os

os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import read_ledger

from support.launcher import ROOT, environment, launch
from support.llmfoundry_parts import SEQ_LEN, sample_of, write_jsonl, write_mds, write_tokenizer, write_yaml, yaml_for

pytestmark = pytest.mark.llmfoundry

STREAM, JSONL = 64, 96
_QUIET = {'prefetch_factor': None, 'persistent_workers': False}


@pytest.fixture(scope='module')
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp('llmfoundry')
    tokenizer = write_tokenizer(root / 'tokenizer', max(STREAM, JSONL))
    from transformers import AutoTokenizer

    return {'tokenizer': tokenizer, 'vocab': len(AutoTokenizer.from_pretrained(str(tokenizer))),
            'mds': write_mds(root / 'mds', STREAM), 'jsonl': write_jsonl(root / 'train.jsonl', JSONL),
            'first_token': sample_of(tokenizer, max(STREAM, JSONL))}


@pytest.fixture(scope='module')
def whole_stream(parts: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The stream trained for 2 epochs (16 batches) without a stop, saving every 5 batches: its config."""
    folder = tmp_path_factory.mktemp('whole-stream')
    whole = yaml_for(parts['tokenizer'], parts['vocab'], _stream_loader(parts), save_folder=str(folder / 'whole'),
                     save_interval='5ba', run_name='whole')
    _train(folder / 'whole.yaml', whole)
    return whole


def _stream_loader(parts: dict[str, Any]) -> dict[str, Any]:
    return {'name': 'text', 'drop_last': True, 'num_workers': 0, **_QUIET,
            'dataset': {'local': str(parts['mds']), 'split': None, 'shuffle': True, 'max_seq_len': SEQ_LEN}}


def _finetuning_loader(parts: dict[str, Any], replication: int = 1) -> dict[str, Any]:
    return {'name': 'finetuning', 'drop_last': True, 'num_workers': 0, **_QUIET,
            'dataset': {'hf_name': 'json', 'hf_kwargs': {'data_files': {'train': str(parts['jsonl'])}},
                        'split': 'train', 'shuffle': True, 'max_seq_len': SEQ_LEN, 'decoder_only_format': True,
                        'allow_pad_trimming': False, 'replication': replication}}


def _train(path: Path, config: dict[str, Any]) -> Any:
    from llmfoundry.command_utils import train_from_yaml
    from omegaconf import OmegaConf
    from omegaconf.resolvers import oc

    try:
        trainer = train_from_yaml(str(write_yaml(path, config)))
        trainer.close()
    finally:
        # train_from_yaml unregisters omegaconf's `oc.env` for the whole process; later
        # tests in this process read recipes that use it.
        if not OmegaConf.has_resolver('oc.env'):
            OmegaConf.register_resolver('oc.env', oc.env, annotation_validation='off')
        # It also starts a one-rank process group for the whole process, which Composer then refuses beside a
        # WORLD_SIZE of 2 (the tests that stand for one rank of several set it).
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return trainer


def _ledger_batches(folder: Path) -> list[tuple[int, list[int]]]:
    (path,) = folder.glob('*-rank0.bin')
    return [(record.epoch, record.indices.tolist()) for record in read_ledger(path).trained]


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, map_location='cpu', weights_only=False)['state']['model']


def test_the_streams_order_follows_the_data_seed_and_the_ledger_sees_it(parts: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    orders = {}
    for name, seed in (('one', 1), ('again', 1), ('two', 2)):
        folder = tmp_path / name
        _train(tmp_path / f'{name}.yaml', yaml_for(parts['tokenizer'], parts['vocab'], _stream_loader(parts),
                                                    seed=seed, save_folder=str(folder), save_interval='1ep'))
        orders[name] = _ledger_batches(folder / 'ledger')
        report = audit_folder(folder)
        assert [(e.exactly_once, e.status) for e in report.epochs] == [(STREAM, 'ok')] * 2
    assert orders['one'] == orders['again']
    assert orders['one'] != orders['two']


def test_a_stream_resumed_mid_epoch_ends_with_the_same_weights(whole_stream: dict[str, Any], tmp_path: Path) -> None:
    whole = Path(whole_stream['save_folder'])
    resumed = {**whole_stream, 'save_folder': str(tmp_path / 'resumed'), 'run_name': 'resumed',
               'load_path': str(whole / 'ep0-ba5-rank0.pt'),
               'callbacks': {'sampler_sync': {}, 'sample_ledger': {'folder': str(whole / 'ledger')}}}
    _train(tmp_path / 'resumed.yaml', resumed)
    first, second = _weights(whole / 'ep2-ba16-rank0.pt'), _weights(tmp_path / 'resumed' / 'ep2-ba16-rank0.pt')
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)
    report = audit_folder(whole)  # both attempts: the resumed one descends from batch 5
    assert len(report.lineage) == 2
    assert [(e.exactly_once, e.status) for e in report.epochs] == [(STREAM, 'ok')] * 2


def test_autoresume_after_a_kill_mid_save_sets_the_file_aside_and_ends_with_the_same_weights(
        whole_stream: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Killed while Composer saved batch 10 (one process of its own), the run used to fail at every later start
    (``FileExistsError: ... may conflict with a future checkpoint``) until someone deleted the 0-byte file. Started
    again with ``autoresume``, SamplerSync sets that file aside before Composer's check, and the run ends with the
    weights of the run that never stopped; its ledger audits across both attempts."""
    folder = tmp_path / 'killed'
    config = {**whole_stream, 'save_folder': str(folder), 'run_name': 'killed', 'autoresume': True}
    dying = {**config, 'callbacks': {**config['callbacks'], 'die_while_saving': {'batch': 10, 'folder': str(folder)}}}
    killed = subprocess.run([sys.executable, 'tests/support/llmfoundry_train.py',
                             str(write_yaml(tmp_path / 'dying.yaml', dying))], cwd=ROOT, capture_output=True,
                            text=True, env=environment(), timeout=400)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-4000:]
    assert (folder / 'ep1-ba10-rank0.pt').stat().st_size == 0
    assert os.readlink(folder / 'latest-rank0.pt') == 'ep0-ba5-rank0.pt'
    capsys.readouterr()
    _train(tmp_path / 'again.yaml', config)  # the same command again: train_from_yaml with autoresume
    assert (f'save_folder {folder}: moved ep1-ba10-rank0.pt (0 bytes) to {folder / "interrupted-1"}: cut short after '
            'ep0-ba5-rank0.pt, the latest checkpoint, which this run resumes') in capsys.readouterr().out
    assert (folder / 'interrupted-1' / 'ep1-ba10-rank0.pt').stat().st_size == 0, 'kept, not deleted'
    first, second = (_weights(Path(path) / 'ep2-ba16-rank0.pt') for path in (whole_stream['save_folder'], folder))
    assert first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)
    report = audit_folder(folder)
    assert len(report.lineage) == 2
    assert [(e.exactly_once, e.status) for e in report.epochs] == [(STREAM, 'ok')] * 2


@pytest.mark.launcher
def test_on_two_ranks_finetuning_with_replication_resumes_exactly_and_both_loaders_audit_once(
        parts: dict[str, Any], tmp_path: Path) -> None:
    loader = _finetuning_loader(parts, replication=2)
    ledger = str(tmp_path / 'ledger')
    callbacks = {'sampler_sync': {'replication': 2}, 'sample_ledger': {'folder': ledger}}
    whole = yaml_for(parts['tokenizer'], parts['vocab'], loader, save_folder=str(tmp_path / 'whole'),
                     save_interval='9ba', run_name='whole', callbacks=callbacks)
    resumed = {**whole, 'save_folder': str(tmp_path / 'resumed'), 'run_name': 'resumed',
               'load_path': str(tmp_path / 'whole' / 'ep0-ba9-rank0.pt')}
    stream = yaml_for(parts['tokenizer'], parts['vocab'], _stream_loader(parts), save_folder=str(tmp_path / 'stream'),
                      save_interval='1ep', run_name='stream')
    paths = [str(write_yaml(tmp_path / f'{name}.yaml', config)) for name, config in
             (('whole', whole), ('resumed', resumed), ('stream', stream))]
    result, output = launch(['-n', '2', 'tests/support/llmfoundry_train.py', *paths], tmp_path / 'logs')
    assert result.returncode == 0, output
    first, second = _weights(tmp_path / 'whole' / 'ep2-ba48-rank0.pt'), _weights(tmp_path / 'resumed' /
                                                                                 'ep2-ba48-rank0.pt')
    assert all(torch.equal(first[name], second[name]) for name in first)
    report = audit_folder(Path(ledger))
    assert report.dataset_len == JSONL and len(report.lineage) == 2
    assert [(e.exactly_once, e.repeated, e.status) for e in report.epochs] == [(JSONL, 0, 'ok')] * 2
    streamed = audit_folder(tmp_path / 'stream')  # the stream's global size, its two ranks' shares
    assert streamed.dataset_len == STREAM
    assert [(e.exactly_once, e.repeated, e.status) for e in streamed.epochs] == [(STREAM, 0, 'ok')] * 2


def test_the_ledger_matches_the_trained_batches_first_tokens(parts: dict[str, Any], tmp_path: Path) -> None:
    """What the ledger records is what llm-foundry's collate put in each batch: sample i starts with token s{i}."""
    from composer.core import Callback, State
    from composer.loggers import Logger
    from llmfoundry.registry import callbacks

    seen: list[list[int]] = []

    class FirstTokens(Callback):
        def batch_end(self, state: State, logger: Logger) -> None:
            seen.append([parts['first_token'][int(token)] for token in state.batch['input_ids'][:, 0]])

    callbacks.register('first_tokens_of_batches', func=FirstTokens)
    for name, loader in (('stream', _stream_loader(parts)), ('finetuning', _finetuning_loader(parts))):
        seen.clear()
        _train(tmp_path / f'{name}.yaml', yaml_for(
            parts['tokenizer'], parts['vocab'], loader, save_folder=str(tmp_path / name), save_interval='1ep',
            callbacks={'sampler_sync': {}, 'sample_ledger': {}, 'first_tokens_of_batches': {}}))
        assert [indices for _, indices in _ledger_batches(tmp_path / name / 'ledger')] == seen, name
