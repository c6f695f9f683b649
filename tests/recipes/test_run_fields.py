"""The recipe fields of a real run's hardware and lifetime: ``device``, ``precision``, ``parallelism_config``,
``autoresume``.

Refusals go through both commands (``plan`` refuses what needs no import, as ``train``
does); what only the machine can decide is refused by ``train``. ``autoresume`` is run:
a run killed after a checkpoint and started again with the same command ends with the
weights and optimizer state of the run that never stopped, and its ledger audits once;
the latest checkpoint it picks passes the checkpoint check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from composer_sampling.audit import audit_folder
from composer_sampling.recipes.autoresume import autoresume_checkpoint
from composer_sampling.recipes.cli import main
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.run_fields import check_parallelism_fields, machine_device
from composer_sampling.recipes.schema import load_recipe
from composer_sampling.train import main as train_main

from support.helpers import states_equal

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')
#: 320 training samples at global batch 64: 5 batches per epoch; checkpoints at batch 3 and at the epoch's end.
SYNTHETIC = [DIGITS, 'train_loader.dataset={name: synthetic, size: 400}', 'max_duration=1ep', 'save_interval=3ba',
             'callbacks.sample_ledger={}']
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason='the refusals of a machine without a CUDA GPU')

BOTH = [
    (['device=tpu'], "device must be one of auto, cpu, gpu, mps, got 'tpu'"),
    (['precision=fp16'], "precision must be one of fp32, amp_fp16, amp_bf16, amp_fp8 (Composer's names), or null"),
    (['device=cpu', 'precision=amp_bf16'], 'precision=amp_bf16 cannot train on device=cpu: Composer trains on the CPU '
                                           'in fp32 only'),
    (['device=cpu', 'parallelism_config={fsdp: {}}'], "parallelism_config (fsdp) cannot train on device=cpu: "
                                                       "Composer's FSDP1 and tensor parallelism need GPUs; "
                                                       'remove it, or use device: gpu; or, for fsdp, set '
                                                       "FSDP_VERSION=2: Composer's FSDP2 trains on the CPU with gloo"),
    (['device=cpu', 'parallelism_config={tp: {}}'], "parallelism_config (tp) cannot train on device=cpu: Composer's "
                                                     'FSDP1 and tensor parallelism need GPUs; remove it, or use '
                                                     'device: gpu\n'),
    (['parallelism_config={pp: {}}'], "unknown field parallelism_config.pp (valid: fsdp, tp, as Composer's Trainer "
                                      'reads it)'),
    (['parallelism_config={fsdp: 3}'], "parallelism_config.fsdp must be a mapping of Composer's FSDPConfig fields"),
    (['parallelism_config=[fsdp]'], "parallelism_config must be a mapping, got a list ['fsdp']"),
    (['autoresume=true'], 'autoresume: true resumes from the latest checkpoint in save_folder, but save_folder is not '
                          'set'),
    (['autoresume=true', 'save_folder=/tmp/composer-sampling-unused'], 'autoresume: true needs run_name'),
    (['autoresume=sometimes'], "invalid value for field 'autoresume'"),
    (['parallelism_config={fsdp: {sharding_strateg: FULL_SHARD}}'],
     "unknown field parallelism_config.fsdp.sharding_strateg (Composer's FSDPConfig takes: "),
    (['parallelism_config={fsdp: {bogus: 1}}'], "unknown field parallelism_config.fsdp.bogus (Composer's FSDPConfig "
                                                'takes: '),
    (['parallelism_config={tp: {degree: 2}}'], "unknown field parallelism_config.tp.degree (Composer's TPConfig "
                                               'takes: device_mesh, tensor_parallel_degree, layer_plan)'),
    (['scheduler={name: cosine_annealing_with_warmup, t_warmup: 64sp}'],
     "scheduler: t_warmup='64sp' counts sp and t_max='1dur' counts ba (with max_duration='4ep'; Composer counts ep as "
     "batches and dur in max_duration's unit); cosine_annealing_with_warmup needs both in one unit"),
]
MACHINE = [
    (['device=gpu'], 'device=gpu, but torch sees no CUDA GPU on this machine (torch.cuda.is_available() is False'),
    (['precision=amp_fp16'], 'precision=amp_fp16 cannot train on device=auto (this machine: cpu, no CUDA GPU is '
                             'visible): Composer trains on the CPU in fp32 only'),
    (['parallelism_config={fsdp: {sharding_strategy: FULL_SHARD}}'],
     'parallelism_config (fsdp) cannot train on device=auto (this machine: cpu, no CUDA GPU is visible)'),
]


def _refused(command: str, overrides: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main([command, DIGITS, *overrides])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(('overrides', 'message'), BOTH, ids=[' '.join(case[0]) for case in BOTH])
def test_plan_and_train_refuse_a_bad_field_alike(overrides: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ('COMPOSER_RUN_NAME', 'RUN_NAME'):
        monkeypatch.delenv(variable, raising=False)
    trained, train_err = _refused('train', overrides, capsys)
    assert trained == 2 and train_err.startswith(f'error: {message}'), train_err
    assert (_refused('plan', overrides, capsys)) == (2, train_err)


@pytest.mark.parametrize(('overrides', 'message'), [pytest.param(*case, marks=NO_GPU) for case in MACHINE],
                         ids=[' '.join(case[0]) for case in MACHINE])
def test_train_alone_refuses_what_the_machine_decides(overrides: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``plan`` may run elsewhere than the run (a laptop planning a GPU run): it accepts these."""
    trained, train_err = _refused('train', [*overrides, 'max_duration=1ba'], capsys)
    assert trained == 2 and train_err.startswith(f'error: {message}') and 'run summary' not in train_err, train_err
    assert _refused('plan', overrides, capsys)[0] == 0


def test_fsdp2_is_taken_on_the_cpu(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Under ``FSDP_VERSION=2`` Composer builds FSDP2, which trains on the CPU with gloo: both commands take an
    ``fsdp`` section on the CPU, its fields checked against FSDPConfig and FSDP2Config; tensor parallelism is still
    refused, and without ``FSDP_VERSION=2`` an FSDP2-only field is unknown."""
    fsdp = {'state_dict_type': 'sharded', 'reshard_after_forward': False}
    monkeypatch.setenv('FSDP_VERSION', '2')
    assert machine_device('cpu', 'fp32', {'fsdp': fsdp}) == 'cpu'
    check_parallelism_fields({'fsdp': fsdp})
    assert main(['plan', DIGITS, 'device=cpu', 'parallelism_config={fsdp: {reshard_after_forward: false}}']) == 0
    capsys.readouterr()
    with pytest.raises(RecipeError, match=r"parallelism_config \(tp\) cannot train on device=cpu"):
        machine_device('cpu', 'fp32', {'fsdp': fsdp, 'tp': {}})
    with pytest.raises(RecipeError, match=r"unknown field parallelism_config.fsdp.reshard \(Composer's FSDPConfig "
                                          r"and FSDP2Config take: .*reshard_after_forward"):
        check_parallelism_fields({'fsdp': {'reshard': False}})
    monkeypatch.setenv('FSDP_VERSION', '1')
    with pytest.raises(RecipeError, match=r"unknown field parallelism_config.fsdp.reshard_after_forward \(Composer's "
                                          r"FSDPConfig takes: "):
        check_parallelism_fields({'fsdp': fsdp})


def test_the_summary_shows_the_device_and_precision(capsys: pytest.CaptureFixture[str]) -> None:
    assert train_main([DIGITS, 'max_duration=1ba', 'device=cpu', 'precision=fp32']) == 0
    out = capsys.readouterr().out
    assert '  device              cpu\n' in out and '  precision           fp32\n' in out, out


# autoresume ------------------------------------------------------------------------------------------------


def _model_and_optimizer(checkpoint: Path) -> tuple[dict[str, torch.Tensor], object]:
    state = torch.load(checkpoint, weights_only=False)['state']
    return state['model'], state['optimizers']



def test_a_killed_run_started_again_with_the_same_command_continues_exactly(tmp_path: Path) -> None:
    """The command has ``autoresume: true``: its first run is killed (SIGKILL) after batch 4, one batch past the
    checkpoint of batch 3; the same command again resumes from that checkpoint and ends as the run that never
    stopped, and its ledger (both attempts) audits every sample exactly once."""
    never = tmp_path / 'never-stopped'
    assert train_main([*SYNTHETIC, f'save_folder={never}', 'run_name=whole']) == 0
    folder = tmp_path / 'run'
    command = [*SYNTHETIC, f'save_folder={folder}', 'run_name=again', 'autoresume=true']
    killed = subprocess.run([sys.executable, 'tests/support/fault_train.py', str(tmp_path), '0', '4', *command],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert os.readlink(folder / 'latest-rank0.pt') == 'ep0-ba3-rank0.pt'
    assert train_main(command) == 0
    final_model, final_optimizer = _model_and_optimizer(folder / 'ep1-ba5-rank0.pt')
    whole_model, whole_optimizer = _model_and_optimizer(never / 'ep1-ba5-rank0.pt')
    assert states_equal(final_model, whole_model) and states_equal(final_optimizer, whole_optimizer)
    report = audit_folder(folder)
    assert [(epoch.exactly_once, epoch.status) for epoch in report.epochs] == [(320, 'ok')]
    assert report.epochs == audit_folder(never).epochs


def test_a_complete_run_started_again_says_so_and_trains_nothing(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An autoresume run started again once it has trained all of max_duration: exit 0 and a sentence saying so, no
    summary, no file written; the same checkpoint named by load_path is refused (Composer's ValueError otherwise)."""
    folder = tmp_path / 'run'
    command = [*SYNTHETIC, f'save_folder={folder}', 'run_name=done', 'autoresume=true']
    assert train_main(command) == 0
    written = sorted((path.name, path.stat().st_mtime_ns) for path in folder.rglob('*') if path.is_file())
    capsys.readouterr()
    assert train_main(command) == 0
    out = capsys.readouterr().out
    assert out == (f'autoresume (the latest checkpoint in save_folder {folder}): the checkpoint '
                   f'{folder}/latest-rank0.pt has trained 1ep (epoch 1, batch 5, sample 320), all of '
                   "max_duration='1ep'; the run is complete, nothing to train. Raise max_duration to train further\n")
    assert sorted((path.name, path.stat().st_mtime_ns) for path in folder.rglob('*') if path.is_file()) == written
    for name in ('plan', 'train'):
        code, err = _refused(name, [*SYNTHETIC[1:], f'load_path={folder}/latest-rank0.pt',
                                    f'save_folder={tmp_path}/other'], capsys)
        assert code == 2 and err.startswith(f'error: load_path: the checkpoint {folder}/latest-rank0.pt has trained '
                                            "1ep (epoch 1, batch 5, sample 320), all of max_duration='1ep': nothing "
                                            'would train'), err
    assert train_main([*command, 'max_duration=2ep']) == 0  # the way out the message names


def test_a_refusal_of_autoresumes_checkpoint_names_autoresume(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The recipe sets no load_path: a refusal of the checkpoint autoresume picks names autoresume and its folder."""
    folder = tmp_path / 'run'
    folder.mkdir()
    (folder / 'ep0-ba3-rank0.pt').write_bytes(b'not a checkpoint')
    (folder / 'latest-rank0.pt').symlink_to('ep0-ba3-rank0.pt')
    code, err = _refused('train', [*SYNTHETIC[1:], f'save_folder={folder}', 'run_name=run', 'autoresume=true'], capsys)
    assert code == 2 and err.startswith(f'error: autoresume (the latest checkpoint in save_folder {folder}): '
                                        f'{folder}/latest-rank0.pt is not a readable checkpoint'), err
    assert 'load_path' not in err.split(':')[0]


def test_a_tmpdir_composer_cannot_read_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """train hands Composer a checked copy in the temporary folder: a TMPDIR with '#' is the cause, named as such."""
    folder = tmp_path / 'run'
    assert train_main([*SYNTHETIC, f'save_folder={folder}', 'max_duration=3ba']) == 0
    odd = tmp_path / 'tmp#dir'
    odd.mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(odd))
    code, err = _refused('train', [*SYNTHETIC[1:], f'load_path={folder}/ep0-ba3-rank0.pt',
                                   f'save_folder={tmp_path}/other'], capsys)
    assert code == 2 and err.startswith(f'error: the checked copy of each checkpoint goes into the temporary folder '
                                        f'{odd} (TMPDIR), where Composer cannot read it: given {odd}/'), err
    assert f"Composer would read {tmp_path}/tmp; set TMPDIR to a folder without '#'" in err
    assert list(odd.iterdir()) == []  # the private folder it made is gone


def test_autoresume_picks_the_latest_checkpoint_and_falls_back_to_load_path(tmp_path: Path) -> None:
    fresh = ['autoresume=true', f'save_folder={tmp_path}/{{run_name}}', 'run_name=a']
    assert autoresume_checkpoint(load_recipe(None, fresh)) is None
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'ep0-ba3-rank0.pt').write_bytes(b'')
    (tmp_path / 'a' / 'latest-rank0.pt').symlink_to('ep0-ba3-rank0.pt')
    assert autoresume_checkpoint(load_recipe(None, fresh)) == f'{tmp_path}/a/latest-rank0.pt'
    assert autoresume_checkpoint(load_recipe(None, [*fresh, 'run_name=b', 'load_path=x.pt'])) is None
    assert autoresume_checkpoint(load_recipe(None, fresh[1:])) is None  # autoresume off



def test_a_resume_onto_other_data_is_refused_by_plan_and_train_unless_allowed(tmp_path: Path, capsys) -> None:
    """The same length, other content: both commands name the two fingerprints before training;
    callbacks.sampler_sync.allow_data_change lets both continue on the new data."""
    def dataset(seed: int) -> str:
        return ('train_loader.dataset={target: "composer_sampling.recipes.demo.data:SyntheticDataset", '
                f'kwargs: {{size: 400, seed: {seed}}}}}')

    assert train_main([DIGITS, dataset(0), 'max_duration=4ba', 'save_interval=2ba', f'save_folder={tmp_path}/run']) == 0
    resumed = [dataset(1), 'max_duration=6ba', f'load_path={tmp_path}/run/ep0-ba4-rank0.pt',
               f'save_folder={tmp_path}/again']
    capsys.readouterr()
    assert main(['plan', DIGITS, *resumed]) == 2
    assert 'the train dataset is not the one the checkpoint trained on' in capsys.readouterr().err
    assert train_main([DIGITS, *resumed]) == 2
    refusal = capsys.readouterr().err
    assert "SyntheticDataset's own fingerprint 'ten Gaussian clusters in 64 dimensions, seed 0" in refusal
    assert "seed 1, 400 samples'" in refusal and 'callbacks.sampler_sync.allow_data_change: true' in refusal
    allowed = [*resumed, 'callbacks.sampler_sync.allow_data_change=true']
    assert main(['plan', DIGITS, *allowed]) == 0, capsys.readouterr().err  # plan agrees with train
    assert train_main([DIGITS, *allowed]) == 0


@pytest.mark.parametrize(('edit', 'message'), [
    (lambda state: {**state, 'data_fingerprint': None}, 'holds no data_fingerprint (None)'),
    (lambda state: {key: value for key, value in state.items() if key != 'data_fingerprint'},
     'state (version 6) has no data_fingerprint, which every state of its version holds'),
], ids=['None', 'removed'])
def test_a_state_whose_version_records_the_fingerprint_refuses_one_removed(edit: Any, message: str,
                                                                          tmp_path: Path, capsys) -> None:
    """A version-6 state edited to hold no fingerprint would resume onto any data: plan and train refuse it."""
    assert train_main([DIGITS, 'max_duration=4ba', 'save_interval=2ba', f'save_folder={tmp_path}/run']) == 0
    whole = torch.load(tmp_path / 'run' / 'ep0-ba4-rank0.pt', weights_only=False)
    callbacks = whole['state']['callbacks']
    (key,) = [key for key in callbacks if 'SamplerSync' in key]
    callbacks[key] = edit(callbacks[key])
    torch.save(whole, tmp_path / 'edited.pt')
    resumed = ['max_duration=6ba', f'load_path={tmp_path}/edited.pt', f'save_folder={tmp_path}/again']
    capsys.readouterr()
    assert main(['plan', DIGITS, *resumed]) == 2
    assert message in capsys.readouterr().err
    assert train_main([DIGITS, *resumed]) == 2
    assert message in capsys.readouterr().err
