"""Every refusal of a recipe, through the command: before any training, exit 2, naming the field.

Each case runs through ``composer-sampling plan`` and ``composer-sampling train``
(their entry point, ``composer_sampling.recipes.cli.main``; a few also as the
installed console script). Both run one pass of checks, so a case marked ``BOTH`` is
refused by both with the same message. ``BUILT`` cases are what only calling a
builder of the model, the optimizer or Composer's parts shows (it raises, or returns
the wrong kind of part): ``plan`` imports those builders and checks their arguments,
but calls only the data parts', so it accepts them (docs/recipes.md lists what
``train`` alone refuses).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from composer.utils import format_name_with_dist, parse_uri
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer_sampling.recipes.build_training import build_run
from composer_sampling.recipes.cli import main
from composer_sampling.recipes.folders import rank_zero_folder
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.runner import set_aside_interrupted
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import main as train_main

from support.helpers import DOCS_ALLOW_LIST, write_escapes_package

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')
NUMBERS = 'train_loader.dataset={target: "support.user_parts:numbers", kwargs: {size: 200}}'
BOTH, BUILT = 'both', 'train only: the builder called'
COMMAND = str(Path(sys.executable).parent / 'composer-sampling')

CASES = [
    # a part's options: one rule, inline or in kwargs, never both
    (BOTH, ['train_loader.sampler={name: resumable, shuffle: true, kwargs: {shuffle: false}}'],
     'train_loader.sampler.shuffle and train_loader.sampler.kwargs.shuffle both set shuffle; give it once'),
    (BOTH, ['train_loader.dataset={name: synthetic, size: 500, kwargs: {size: 300}}'],
     'train_loader.dataset.size and train_loader.dataset.kwargs.size both set size'),
    (BOTH, ['train_loader.dataset={name: digits, kwargs: {read_delay_ms: -5}}'],
     'train_loader.dataset.kwargs.read_delay_ms must be a number in [0, inf), got -5'),
    (BOTH, ['train_loader.dataset={name: synthetic, kwargs: {size: -3}}'],
     'train_loader.dataset.kwargs.size must be an int in [1, inf), got -3'),
    (BOTH, ['train_loader.dataset={name: synthetic, size: 0}'], 'train_loader.dataset.size must be an int in [1, inf)'),
    (BOTH, ['train_loader.sampler.shufle=false'],
     'unknown field train_loader.sampler.shufle (valid: name, target, kwargs, shuffle, drop_last)'),
    (BOTH, ['train_loader.sampler.drop_last=maybe'], 'train_loader.sampler.drop_last must be true or false'),
    (BOTH, ['optimizer.lr=0'], 'optimizer.lr must be a number in (0, inf), got 0'),
    (BOTH, ['train_loader.sampler.name=sub_epoch'],
     'train_loader.sampler.sub_epochs_per_epoch is required for sub_epoch (an int in [1, inf))'),
    (BOTH, ['train_loader.sampler={name: mixture, source_fractions: [0.7, 0.2]}'],
     'train_loader.sampler.source_fractions must be a list of positive fractions summing to 1'),
    # the callbacks' options
    (BOTH, ['callbacks.sampler_sync.check_sharding=maybe'],
     'callbacks.sampler_sync.check_sharding must be true or false, got \'maybe\''),
    (BOTH, ['callbacks.sampler_sync.data_sed=3'], 'unknown field callbacks.sampler_sync.data_sed (valid: data_seed, '),
    (BOTH, ['callbacks.sampler_sync.data_seed=-1'], 'callbacks.sampler_sync.data_seed must be an int in [0, '),
    (BOTH, ['callbacks.sample_ledger={}'], 'callbacks.sample_ledger writes to {save_folder}/ledger: set save_folder'),
    # names and targets
    (BOTH, ['train_loader.dataset.name=imagenet'],
     "train_loader.dataset.name: 'imagenet' is not a registered dataset; choose one of: digits, synthetic"),
    (BOTH, ['model.name=resnet'], "model.name: 'resnet' is not a registered model; choose one of: mlp"),
    (BOTH, ['callbacks.fancy={}'], "callbacks.fancy.name: 'fancy' is not a registered callback"),
    (BOTH, ['model={name: mlp, target: "support.user_parts:linear"}'], "model gives both name='mlp' and target="),
    (BOTH, ['model.target=support.user_parts.linear'], "model.target must look like 'package.module:callable'"),
    (BOTH, ['model={target: "support.user_parts:linear", hidden_size: 3}'],
     'model.hidden_size: with target, the only other key is kwargs'),
    (BOTH, ['callbacks={mine: {target: "support.user_parts:linear", classes: 3}}'],
     'callbacks.mine.classes: with target, the only other key is kwargs'),
    (BOTH, ['eval_loader.eval_fraction=0.3', 'train_loader.dataset.eval_fraction=0.2'],
     'eval_loader.eval_fraction and train_loader.dataset.eval_fraction both set the held-out fraction'),
    (BOTH, [NUMBERS, 'train_loader.dataset.kwargs={sise: 3}'],
     "train_loader.dataset: the dataset numbers: unexpected keyword 'sise'; it takes: size, classes"),
    (BOTH, [NUMBERS, 'train_loader.sampler={target: "support.user_parts:numbers"}'],
     "train_loader.sampler: the sampler numbers: unexpected keyword 'dataset'"),
    (BOTH, ['train_loader.dataset={target: \"no_such_package.data:build\"}'],
     "train_loader.dataset: target 'no_such_package.data:build': cannot import no_such_package.data"),
    # what a builder returns, or raises
    (BOTH, ['train_loader.dataset={target: \"support.user_parts:not_a_dataset\"}'],
     'train_loader.dataset: the builder returned a int; a recipe trains on a map-style dataset with a length'),
    (BOTH, ['train_loader.dataset={target: \"support.user_parts:three_sources\"}'],
     'train_loader.dataset: the builder returned 3 datasets, the sources of a mixture, but train_loader.sampler '
     '(resumable) takes one dataset'),
    (BOTH, ['train_loader.dataset={target: "support.user_parts:failing", kwargs: {size: 10}}'],
     'train_loader.dataset: support.user_parts:failing raised ValueError: no sample 10 in this folder'),
    (BOTH, [NUMBERS, 'train_loader.sampler={target: "support.user_parts:junk_sampler"}'],
     'train_loader.sampler: the builder returned a int; return a sampler, a batch sampler or a DataLoader'),
    # the run's own fields
    (BOTH, ['seed=-1'], 'seed must be in the interval [0, 2**32 - world size]'),
    (BOTH, ['max_duration=0ep'], "max_duration='0ep' must be positive (0 would train nothing)"),
    # a duration Composer would read as another number: it parses durations as 64-bit floats
    (BOTH, ['max_duration=99999999999999999999999999ep'],
     "max_duration='99999999999999999999999999ep' is out of range: Composer reads the number as a 64-bit float, "
     'which turns it into 100000000000000004764729344; use a whole number from 1 to 2**53 (9007199254740992) '
     'followed by ep'),
    (BOTH, ['save_interval=9007199254740994ba'],
     "save_interval='9007199254740994ba' is out of range: Composer reads the number as a 64-bit float, which holds "
     'every whole number exactly only up to 2**53; use a whole number from 1 to 2**53 (9007199254740992) followed '
     'by ba'),
    (BOTH, ['max_duration=1.0000000000000000001ep'],
     "max_duration='1.0000000000000000001ep': the unit ep needs a whole number, and Composer would read this one "
     'as 1; use a whole number from 1 to 2**53 (9007199254740992) followed by ep'),
    (BOTH, ['global_train_batch_size=63'], 'global_train_batch_size=63 is not divisible by the world size 2'),
    (BOTH, ['global_train_batch_size=2000'], 'global_train_batch_size=2000 is larger than the train split of 1438'),
    (BOTH, ['=5'], "override '=5' must look like field=value"),
    (BOTH, ['global_batch=64'], "unknown field 'global_batch' in override 'global_batch=64'; valid fields here: "),
    (BOTH, ['seed=${oc.env:COMPOSER_SAMPLING_UNSET}'], "seed: KeyError raised while resolving interpolation: "
                                                       "\"Environment variable 'COMPOSER_SAMPLING_UNSET' not found\""),
    # moved here from the schema and registry tests: every refusal runs through both commands
    (BOTH, ['global_train_batch_size=many'], "invalid value for field 'global_train_batch_size'"),
    (BOTH, ['global_train_batch_size=0'], 'global_train_batch_size must be at least 1, got 0'),
    (BOTH, ['device_train_microbatch_size=-4'], 'device_train_microbatch_size must be at least 1, got -4'),
    (BOTH, ['gradient_accumulation_steps=0'], 'gradient_accumulation_steps must be at least 1, got 0'),
    (BOTH, ['train_loader.num_workers=-1'], 'train_loader.num_workers must be at least 0, got -1'),
    (BOTH, ['global_train_batch_size=60', 'device_train_microbatch_size=25'],
     'device_train_microbatch_size=25 does not divide the device batch 60'),
    (BOTH, ['global_train_batch_size=64', 'device_train_microbatch_size=16', 'gradient_accumulation_steps=2'],
     'gradient_accumulation_steps=2 disagrees with device_train_microbatch_size=16'),
    (BOTH, ['train_loader.sampler.name=fancy'],
     "train_loader.sampler.name: 'fancy' is not a registered sampler; choose one of: resumable, distributed"),
    (BOTH, ['optimizer.name=lion'], "optimizer.name: 'lion' is not a registered optimizer; choose one of: adamw, sgd"),
    (BOTH, ['train_loader.collate_fn={name: pad}'],
     "train_loader.collate_fn.name: 'pad' is not a registered collate_fn"),
    (BOTH, ['train_loader.dataset.name=synthetic'],
     'train_loader.dataset.size is required for synthetic (an int in [1, inf))'),
    (BOTH, ['train_loader.sampler.num_batches=2'],
     'unknown field train_loader.sampler.num_batches (valid: name, target, kwargs, shuffle, drop_last)'),
    (BOTH, ['train_loader.dataset.size=10'], 'unknown field train_loader.dataset.size (valid: name, target, kwargs, '
                                             'read_delay_ms)'),
    (BOTH, ['callbacks={mine: {target: "not a target"}}'], "callbacks.mine.target must look like 'package.module"),
    (BOTH, ['train_loader.dataset={target: "support.user_parts:numbers", eval_fraction: 0.3}'],
     'train_loader.dataset.eval_fraction: with target, the only other key is kwargs'),
    (BOTH, ['max_duration=forever'], "max_duration='forever' is not a duration this run can count"),
    (BOTH, ['seed'], "override 'seed' must look like field=value"),
    (BOTH, ['optimizer.lr=.nan'], 'optimizer.lr must be a finite number, got nan'),
    (BOTH, ['optimizer.weight_decay=-.inf'], 'optimizer.weight_decay must be a finite number, got -inf'),
    (BOTH, ['train_loader.dataset.eval_fraction=.nan'], 'train_loader.dataset.eval_fraction must be a finite number'),
    (BOTH, ['train_loader.dataset.read_delay_ms=.inf'], 'train_loader.dataset.read_delay_ms must be a finite number'),
    (BOTH, ['dist_timeout=.nan'], 'dist_timeout must be a finite number, got nan'),
    (BOTH, ['train_loader.sampler.name=mixture', 'train_loader.sampler.source_fractions=[0.5,.nan]'],
     'train_loader.sampler.source_fractions[1] must be a finite number, got nan'),
    (BOTH, ['seed=4294967296'], 'seed must be in the interval [0, 2**32 - world size] ([0, 4294967295] on one '
                                'process)'),
    (BOTH, ['train_loader.dataset.eval_fraction=0.0001'], 'train_loader.dataset.eval_fraction=0.0001 leaves the '
                                                          'held-out split of the digits dataset (1797 samples) empty'),
    (BOTH, ['train_loader.sampler.name=mixture', 'train_loader.sampler.source_fractions=[0.99,0.01]'],
     'train_loader.sampler.source_fractions=[0.99, 0.01]: source 1 (fraction 0.01) holds 14 of the 1438 train '
     'samples, fewer than one global step of 64, so it would never be trained; give every source a fraction of at '
     'least 0.045 (64 / 1438), or a global_train_batch_size of at most 14'),
    (BOTH, ['train_loader=[1,2]'], 'train_loader must be a mapping of fields (dataset, sampler, collate_fn, '
                                   'num_workers, per_sample_rng), got a list [1, 2]'),
    (BOTH, ['train_loader.sampler=fast'], "train_loader.sampler must be a mapping, got 'fast'"),
    (BOTH, ['train_loader=null'], 'train_loader must be a mapping, got null'),
    (BOTH, ['callbacks=[sampler_sync]'], "callbacks must be a mapping, got a list ['sampler_sync']"),
    (BOTH, ['callbacks.sampler_sync=[1]'], 'callbacks.sampler_sync must be a mapping of arguments (or empty), got '
                                           '[1]'),
    (BOTH, ['seed=[1]'], 'seed must be a single value, got a list [1]'),
    (BOTH, ['save_folder=runs/a#b'], "save_folder 'runs/a#b': Composer reads the local path 'runs/a#b' as a URI, and "
                                     "would write into 'runs/a' instead (a '#', '?' or ';' ends the path, spaces at "
                                     "either end are dropped); choose a folder without '#', '?', ';' or spaces at "
                                     'either end'),
    (BOTH, ['model.target=support.user_parts:missing'],
     "model: target 'support.user_parts:missing': support.user_parts has no attribute missing"),
    (BOTH, ['train_loader.dataset={target: "support.user_parts:three_sources"}', 'train_loader.sampler={name: mixture, '
            'source_fractions: [0.5, 0.5]}'],
     'train_loader.sampler.source_fractions cuts one dataset into sources, but the train_loader.dataset builder '
     'returned 3 of them'),
    (BOTH, [NUMBERS, 'train_loader.sampler.name=mixture'],
     'train_loader.sampler.source_fractions is required for the mixture sampler when the train_loader.dataset '
     'builder returns one dataset'),
    (BOTH, ['train_loader.dataset={target: "support.user_parts:three_sources", kwargs: {sizes: [600, 20]}}',
            'train_loader.sampler.name=mixture'],
     'train_loader.dataset: source 1 holds 16 of the 496 train samples, fewer than one global step of 64'),
    (BOTH, ['train_loader.collate_fn={target: "support.user_parts:not_a_dataset"}'],
     'train_loader.collate_fn: the collate fn not_a_dataset: too many positional arguments; it takes: none'),
    (BOTH, ['model.target=support.user_parts:NOT_CALLABLE'],
     "model: target 'support.user_parts:NOT_CALLABLE' is a int, not a callable"),
    (BOTH, ['model.target=support.user_parts:numbers'], "model: the model numbers: missing required keyword 'size'"),
    (BOTH, ['callbacks.fancy_logger={}', 'callbacks.sampler_sync={}'],
     "callbacks.fancy_logger.name: 'fancy_logger' is not a registered callback; choose one of: sampler_sync, "
     'sample_ledger'),
    (BOTH, ['callbacks={mine: {target: "support.user_parts:nothing_here"}}'],
     "callbacks.mine: target 'support.user_parts:nothing_here': support.user_parts has no attribute nothing_here"),
    # the model's, the optimizer's and the callbacks' builders: imported and their arguments checked by both
    (BOTH, ['model={target: "support.user_parts:linear", kwargs: {clases: 3}}'],
     "model: the model linear: unexpected keyword 'clases'; it takes: classes, with_num_classes"),
    (BOTH, ['optimizer={target: "torch.optim:AdamW", kwargs: {learning_rate: 0.1}}'],
     "optimizer: the optimizer AdamW: unexpected keyword 'learning_rate'"),
    (BOTH, ['callbacks.lr_monitor={window: 3}'], "callbacks.lr_monitor: the callback LRMonitor: unexpected keyword "
                                                  "'window'"),
    (BUILT, ['model.target=support.user_parts:raising_model'],
     'model: support.user_parts:raising_model raised RuntimeError: out of memory while building the model'),
    # Composer's schedulers, loggers and algorithms: names, times and arguments by both
    (BOTH, ['scheduler={name: cosine}'], "scheduler.name: 'cosine' is not a registered scheduler; choose one of: "
                                         'constant, step, multi_step, linear, exponential, cosine_annealing, '),
    (BOTH, ['scheduler={}'], 'scheduler needs a name (one of: constant, step, '),
    (BOTH, ['scheduler={name: constant}', 'schedulers=[{name: linear}]'],
     'scheduler and schedulers both set the LR schedule; give one: scheduler (one part) or schedulers (a list of '
     'parts)'),
    (BOTH, ['scheduler={name: cosine_annealing_with_warmup}'],
     'scheduler.t_warmup is required for CosineAnnealingWithWarmupScheduler (a Composer time: a whole number ≥ 0 '
     'followed by ep, ba, sp or tok, or a number ≥ 0 followed by dur (a fraction of max_duration), e.g. 100ba or '
     '0.1dur)'),
    (BOTH, ['scheduler={name: linear_with_warmup, t_warmup: 10 batches}'],
     "scheduler.t_warmup must be a Composer time: a whole number ≥ 0 followed by ep, ba, sp or tok, or a number ≥ 0 "
     "followed by dur (a fraction of max_duration), e.g. 100ba or 0.1dur, got '10 batches'"),
    (BOTH, ['schedulers=[{name: constant}, {name: step, step_size: 0ep}]'],
     "schedulers[1].step_size must be a Composer time: a whole number > 0 followed by ep, ba, sp or tok"),
    (BOTH, ['scheduler={name: multi_step, milestones: [2ba, 1.5ep]}'],
     "scheduler.milestones[1] must be a Composer time: a whole number ≥ 0"),
    (BOTH, ['schedulers=[cosine]'], "schedulers[0] must be a mapping (a scheduler part), got 'cosine'"),
    (BOTH, ["scheduler={target: 'composer.optim:CosineAnnealingWithWarmupScheduler', kwargs: {t_warmup: 3 parsecs}}"],
     "scheduler.kwargs.t_warmup: '3 parsecs' is not a number followed by a unit"),
    (BOTH, ['scale_schedule_ratio=0'], 'scale_schedule_ratio must be a number in (0, inf), got 0'),
    (BOTH, ['scale_schedule_ratio=0.5'], 'scale_schedule_ratio=0.5 scales the LR schedule and max_duration, but the '
                                         'recipe sets no scheduler'),
    (BOTH, ['scale_schedule_ratio=fast'], "invalid value for field 'scale_schedule_ratio'"),
    (BOTH, ['loggers.tensorbored={}'], "loggers.tensorbored.name: 'tensorbored' is not a registered logger; choose "
                                       'one of: progress_bar, console, file, in_memory, wandb, mlflow, '),
    (BOTH, ['loggers=[file]'], "loggers must be a mapping, got a list ['file']"),
    (BOTH, ['loggers.file=log.txt'], "loggers.file must be a mapping of arguments (or empty), got 'log.txt'"),
    (BOTH, ['progress_bar=sometimes'], "invalid value for field 'progress_bar'"),
    (BOTH, ['log_to_console=[1]'], 'log_to_console must be a single value, got a list [1]'),
    (BOTH, ['console_log_interval=100sp'], "console_log_interval='100sp': the unit sp is not one this run can count "
                                           "(Composer's console logger counts epochs and batches only); use a whole "
                                           'number of at least 1 followed by ep, ba'),
    (BOTH, ['console_log_interval=0ba'], "console_log_interval='0ba' must be positive (0 would never log)"),
    (BOTH, ['console_log_interval=often'], "console_log_interval='often' is not a duration this run can count"),
    (BOTH, ['algorithms.label_smoothin={}'], "algorithms.label_smoothin.name: 'label_smoothin' is not a registered "
                                             'algorithm; choose one of: alibi, augmix, '),
    (BOTH, ['algorithms.seq_length_warmup={}'],
     "algorithms.seq_length_warmup: Composer's SeqLengthWarmup is refused: it truncates or reshapes every batch to a "
     'warming-up sequence length, so samples are cut and batches are not the planned ones; a recipe promises every '
     'sample trained once an epoch, in batches of the planned size, and an exact resume'),
    (BOTH, ['algorithms.selective_backprop={}'], "algorithms.selective_backprop: Composer's SelectiveBackprop is "
                                                 'refused: it drops the samples of lowest loss from the backward '
                                                 'pass, so part of every batch never trains'),
    (BOTH, ['algorithms.alibi={max_sequence_length: 128}'], "algorithms.alibi: Composer's Alibi is refused: it "
                                                            'reshapes every batch of a dict'),
    (BUILT, ['algorithms.mine={target: "composer.algorithms:SelectiveBackprop"}'],
     "algorithms.mine: the builder returned Composer's SelectiveBackprop (selective_backprop), which a recipe "
     'refuses: it drops the samples of lowest loss'),
    (BOTH, ['scheduler={name: cosine_annealing_with_warmup, t_warmup: 2ba, alpha: 0.1}'],
     "scheduler: the scheduler CosineAnnealingWithWarmupScheduler: unexpected keyword 'alpha'; it takes: t_warmup, "
     't_max, alpha_f, scale_warmup'),
    (BOTH, ['loggers.file={file_name: log.txt}'], "loggers.file: the logger FileLogger: unexpected keyword "
                                                   "'file_name'; it takes: filename, remote_file_name, "),
    (BOTH, ['algorithms.gradient_clipping={clipping_threshold: 1.0}'],
     "algorithms.gradient_clipping: the algorithm GradientClipping: missing required keyword 'clipping_type'"),
    (BUILT, ['algorithms.mine={target: "support.user_parts:numbers", kwargs: {size: 3}}'],
     'algorithms.mine: the builder returned a Numbers, not a composer.core.Algorithm'),
    # Composer's parts that Composer itself would stop at the first batch, or after the summary
    (BOTH, ['algorithms.gradient_clipping={clipping_type: bogus, clipping_threshold: 1.0}'],
     "algorithms.gradient_clipping.clipping_type must be one of adaptive, norm, value, got 'bogus' (Composer checks it "
     'only at the first batch)'),
    (BOTH, ['algorithms.mine={target: "composer.algorithms:GradientClipping", kwargs: {clipping_type: l2, '
            'clipping_threshold: 1.0}}'],
     "algorithms.mine.kwargs.clipping_type must be one of adaptive, norm, value, got 'l2'"),
    (BOTH, ['algorithms.cutmix={}'],
     "algorithms.cutmix.input_key=0: the batch is a dict with the keys 'input', 'target', 'index' (KeyError), as the "
     'train loader collates the digits dataset; cutmix reads it there at every batch. Set input_key to where the '
     'batch holds it, or remove algorithms.cutmix'),
    (BOTH, ['algorithms.label_smoothing={smoothing: 0.1}'],
     "algorithms.label_smoothing.target_key=1: the batch is a dict with the keys 'input', 'target', 'index'"),
    (BOTH, ['algorithms.cutout={input_key: input}'],
     "algorithms.cutout: cutout takes image batches of at least 4 dimensions (N, C, H, W), but the input at "
     "input_key='input' is of shape [1, 64] (the digits dataset, collated); remove algorithms.cutout, or train on "
     'images'),
    (BOTH, ['scheduler={name: linear_with_warmup, t_warmup: 1ba}', 'scale_schedule_ratio=0.3', 'max_duration=3ba'],
     "scale_schedule_ratio=0.3 scales max_duration='3ba' to 0ba (Composer keeps the whole units of 3 x 0.3), which "
     'trains nothing; use a scale_schedule_ratio of at least 0.334, or a longer max_duration'),
    (BOTH, ['scheduler={name: cosine_annealing, t_max: 3tok}'],
     "scheduler.t_max='3tok' counts tokens, but Composer counts none in this run (the digits dataset yields no "
     'input_ids and has no max_seq_len), so the run would never reach it: the LR schedule would not move'),
    (BOTH, ['schedulers=[{name: multi_step, milestones: [2ba, 5tok]}]'],
     "schedulers[0].milestones[1]='5tok' counts tokens"),
    (BOTH, ["scheduler={target: 'composer.optim:LinearScheduler', kwargs: {t_max: 7tok}}"],
     "scheduler.kwargs.t_max='7tok' counts tokens"),
]


def _run(command: str, overrides: list[str], capsys: pytest.CaptureFixture[str], recipe: str = DIGITS,
         world_size: int = 1) -> tuple[int, str]:
    extra = ['--world-size', str(world_size)] if command == 'plan' else []
    code = main([command, recipe, *extra, *overrides])
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(('where', 'overrides', 'message'), CASES, ids=[' '.join(case[1])[:60] for case in CASES])
def test_a_bad_recipe_is_refused_before_training(where: str, overrides: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    if overrides == ['global_train_batch_size=63']:  # a world-size rule: train runs here on one process
        code, err = _run('plan', overrides, capsys, world_size=2)
        assert (code, err.startswith(f'error: {message}')) == (2, True), err
        return
    trained, train_err = _run('train', overrides, capsys)
    assert trained == 2 and message in train_err and 'run summary' not in train_err, train_err
    assert train_err.startswith('error: ') and len(train_err.strip().splitlines()) == 1, train_err
    planned, plan_err = _run('plan', overrides, capsys)
    if where == BOTH:
        assert (planned, plan_err) == (2, train_err), 'plan and train refuse with the same message'
    else:
        assert planned in (0, 1), plan_err


def test_what_composer_takes_is_not_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """The neighbours of the refusals above: the batch's own keys, a ratio that leaves a batch, time in batches."""
    for overrides in (['algorithms.mixup={input_key: input, target_key: target}',
                       'algorithms.label_smoothing={smoothing: 0.1, target_key: target}',
                       'algorithms.gradient_clipping={clipping_type: adaptive, clipping_threshold: 0.01}'],
                      ['scheduler={name: linear_with_warmup, t_warmup: 1ba}', 'scale_schedule_ratio=0.34',
                       'max_duration=3ba'],
                      ['scheduler={name: multi_step, milestones: [2ba, 1ep]}']):
        assert main(['plan', DIGITS, *overrides]) == 0, capsys.readouterr().err
    assert main(['train', DIGITS, 'max_duration=2ba', 'algorithms.mixup={input_key: input, target_key: target}']) == 0


def test_the_users_traceback_shows_with_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    overrides = ['train_loader.dataset={target: "support.user_parts:failing", kwargs: {size: 10}}']
    assert main(['--verbose', 'plan', DIGITS, *overrides]) == 2
    err = capsys.readouterr().err
    assert 'Traceback (most recent call last)' in err and "raise ValueError(f'no sample {size} in this folder')" in err


@pytest.mark.parametrize('error', ['SyntaxError', 'RuntimeError'])
def test_a_module_that_fails_to_import_is_named_with_its_error(error: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    body = 'def build(:\n' if error == 'SyntaxError' else 'raise RuntimeError("no GPU here")\n'
    (tmp_path / f'broken_{error.lower()}.py').write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    overrides = [f'train_loader.dataset={{target: "broken_{error.lower()}:build"}}']
    for command in ('plan', 'train'):
        code, err = _run(command, overrides, capsys)
        assert code == 2 and err.startswith(f"error: train_loader.dataset: target 'broken_{error.lower()}:build': "
                                            f'importing broken_{error.lower()} failed with {error}'), err


def test_an_empty_recipe_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / 'empty.yaml'
    empty.write_text('# nothing yet\n')
    for command in ('plan', 'train'):
        code, err = _run(command, [], capsys, recipe=str(empty))
        assert code == 2 and f'error: the recipe {empty} is empty' in err, err


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the synthetic recipe at batch 3 (of 5 an epoch), data seed 23."""
    folder = tmp_path_factory.mktemp('run')
    assert main(['train', DIGITS, 'train_loader.dataset={name: synthetic, size: 400}', 'max_duration=3ba',
                 'callbacks.sampler_sync.data_seed=23', f'save_folder={folder}', 'save_interval=3ba']) == 0
    return folder / 'ep0-ba3-rank0.pt'


@pytest.mark.parametrize(('overrides', 'message'), [
    (['train_loader.dataset={name: synthetic, size: 300}'],
     'the checkpoint was written with ResumableDistributedSampler dataset_len=320, the train dataloader now has '
     'dataset_len=240'),
    (['train_loader.dataset={name: synthetic, size: 400}', 'train_loader.sampler.shuffle=false'],
     'the checkpoint was written with ResumableDistributedSampler shuffle=True, the train dataloader now has '
     'shuffle=False'),
    (['train_loader.dataset={name: synthetic, size: 400}', 'train_loader.sampler={name: sub_epoch, '
      'sub_epochs_per_epoch: 2}'],
     'the checkpoint was written with the sampler ResumableDistributedSampler, the train dataloader now has '
     'SubEpochDistributedSampler('),
])
def test_a_resume_into_another_order_exits_2_with_samplersyncs_message(checkpoint: Path, overrides: list[str],
                                                                       message: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run('train', [*overrides, f'load_path={checkpoint}'], capsys)
    assert code == 2 and message in err, err


def test_after_a_resume_the_summary_shows_the_checkpoints_data_seed(checkpoint: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['train', DIGITS, 'train_loader.dataset={name: synthetic, size: 400}', 'max_duration=4ba',
                 f'load_path={checkpoint}']) == 0
    captured = capsys.readouterr()
    assert "data seed           23 (the checkpoint's, at load_path)" in captured.out
    assert 'had seed' not in captured.err


def test_folders_are_checked_before_the_summary(tmp_path: Path, checkpoint: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / 'a-file'
    afile.write_text('')
    cases = [
        ([f'save_folder={checkpoint.parent}'], f'save_folder {checkpoint.parent} holds the checkpoints of an earlier '
                                               'run (ep0-ba3-rank0.pt'),
        ([f'save_folder={afile}'], f'save_folder {afile} is a file, not a folder'),
        ([f'save_folder={tmp_path}/run', f'callbacks.sample_ledger.folder={afile}'],
         f'the ledger folder {afile} is a file, not a folder'),
        (['save_folder=/proc/composer-sampling-run'], 'save_folder /proc/composer-sampling-run cannot be created'),
    ]
    for overrides, message in cases:
        code, err = _run('train', overrides, capsys)
        assert code == 2 and message in err and 'run summary' not in err, err
    assert main(['train', DIGITS, 'max_duration=2ba', f'save_folder={checkpoint.parent}',
                 'save_overwrite=true']) == 0


def test_a_save_folder_template_is_checked_as_composer_fills_it(tmp_path: Path, checkpoint: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv('COMPOSER_RUN_NAME', raising=False)
    monkeypatch.delenv('RUN_NAME', raising=False)
    afile = tmp_path / 'a-file'
    afile.write_text('')
    (tmp_path / 'rank0').write_text('')
    earlier = checkpoint.parent
    cases = [  # the run named by the recipe, by the environment, or not yet (Composer names it at fit start)
        ([f'save_folder={afile}/{{run_name}}', 'run_name=mine'],
         f"save_folder '{afile}/{{run_name}}' ({afile}/mine for this run) cannot be created: {afile} is not a folder"),
        ([f'save_folder={afile}/runs/{{run_name}}'], f"save_folder '{afile}/runs/{{run_name}}' cannot be created: "
                                                      f'{afile} is not a folder'),
        ([f'save_folder={tmp_path}/rank{{rank}}'], f"save_folder '{tmp_path}/rank{{rank}}' ({tmp_path}/rank0 for this "
                                                    'run) is a file, not a folder'),
        ([f'save_folder={earlier.parent}/{{run_name}}', f'run_name={earlier.name}'],
         f"save_folder '{earlier.parent}/{{run_name}}' ({earlier} for this run) holds the checkpoints of an earlier "
         'run (ep0-'),
        ([f'save_folder={tmp_path}/{{run_name}}', 'run_name=x', f'callbacks.sample_ledger.folder={afile}/{{rank}}'],
         f"the ledger folder '{afile}/{{rank}}' ({afile}/0 for this run) cannot be created: {afile} is not a folder"),
        ([f'save_folder={tmp_path}/{{run_name', 'run_name=x'],
         f"save_folder '{tmp_path}/{{run_name' cannot be filled as Composer fills it (expected '}}' before end of "
         'string); its placeholders may be {run_name}, {rank}, {local_rank}, {node_rank}, {world_size}, '
         '{local_world_size}'),
    ]
    for overrides, message in cases:
        code, err = _run('train', overrides, capsys)
        assert code == 2 and message in err and 'run summary' not in err, err
    monkeypatch.setenv('COMPOSER_RUN_NAME', earlier.name)
    code, err = _run('train', [f'save_folder={earlier.parent}/{{run_name}}'], capsys)
    assert code == 2 and f'({earlier} for this run) holds the checkpoints of an earlier run' in err, err


PLACEHOLDERS = st.sampled_from(['{run_name}', '{rank}', '{local_rank}', '{node_rank}', '{world_size}',
                                 '{local_world_size}', '{rank:>3}', '{run_name!r}', '{{rank}}', '{other}'])


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.one_of(PLACEHOLDERS, st.text('ab/_-.', max_size=4)), max_size=6),
       run_name=st.text('ab{}_-', min_size=1, max_size=6))
def test_a_save_folder_is_filled_as_composers_format_name_with_dist_fills_it_on_rank_0(pieces: list[str],
                                                                                       run_name: str) -> None:
    template = ''.join(pieces)
    try:
        expected: str | None = format_name_with_dist(template, run_name)  # this process is rank 0 of 1
    except (ValueError, AttributeError, TypeError, IndexError):
        expected = None
    if expected is None:
        with pytest.raises(RecipeError, match=re.escape(f'save_folder {template!r} cannot be filled as Composer '
                                                        'fills it')):
            rank_zero_folder('save_folder', template, run_name)
    elif parse_uri(expected) != ('', '', expected):  # where Composer would write: not the folder it was given
        with pytest.raises(RecipeError, match=re.escape(f'save_folder {template!r}: Composer reads the local path '
                                                        f'{expected!r} as a URI')):
            rank_zero_folder('save_folder', template, run_name)
    else:
        assert rank_zero_folder('save_folder', template, run_name) == expected


def test_a_resume_from_an_earlier_checkpoint_into_a_folder_with_later_ones_is_refused(
        tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not the folder's latest: the later checkpoints are another lineage's, and this run would write them again."""
    later = [tmp_path / 'ep0-ba4-rank0.pt', tmp_path / 'ep0-ba5-rank0.pt']
    for path in (tmp_path / checkpoint.name, *later):
        shutil.copyfile(checkpoint, path)
    (tmp_path / 'latest-rank0.pt').symlink_to('ep0-ba5-rank0.pt')
    overrides = ['train_loader.dataset={name: synthetic, size: 400}', 'max_duration=6ba', 'save_interval=1ba',
                 f'save_folder={tmp_path}', f'load_path={tmp_path}/{checkpoint.name}']
    code, err = _run('train', overrides, capsys)
    assert (code, err.strip()) == (2, (
        f'error: save_folder {tmp_path} holds ep0-ba4-rank0.pt, ep0-ba5-rank0.pt, checkpoints later than the one '
        'load_path resumes (ep0-ba3-rank0.pt), which this run would write again; Composer refuses to write over '
        f'them. Resume from the folder\'s latest (load_path={tmp_path}/latest-rank0.pt), choose another '
        'save_folder for this run, or set save_overwrite: true to replace them'))
    assert sorted(path.name for path in tmp_path.iterdir()) == ['ep0-ba3-rank0.pt', *[p.name for p in later],
                                                                 'latest-rank0.pt'], 'nothing moved'


def test_what_a_full_disk_left_after_the_latest_checkpoint_is_moved_aside_never_deleted(
        tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torch.save cut short by ENOSPC leaves a truncated file; Composer links the latest only after a whole one."""
    shutil.copyfile(checkpoint, tmp_path / checkpoint.name)
    (tmp_path / 'latest-rank0.pt').symlink_to(checkpoint.name)
    whole = checkpoint.read_bytes()
    spec = resolve(load_recipe(DIGITS, ['train_loader.dataset={name: synthetic, size: 400}', 'save_interval=1ba',
                                        f'save_folder={tmp_path}', f'load_path={tmp_path}/latest-rank{{rank}}.pt']))
    for attempt in (1, 2):  # the same crash twice: each resume sets its leftovers aside in a folder of its own
        (tmp_path / 'ep0-ba4-rank0.pt').write_bytes(whole[:len(whole) // 2])
        run = build_run(spec)  # the latest is resumed: no refusal
        assert set_aside_interrupted(run.interrupted) == tmp_path / f'interrupted-{attempt}'
        assert (tmp_path / f'interrupted-{attempt}' / 'ep0-ba4-rank0.pt').read_bytes() == whole[:len(whole) // 2]
        assert f'moved ep0-ba4-rank0.pt ({len(whole) // 2} bytes) to {tmp_path}/interrupted-{attempt}' in \
            capsys.readouterr().out
    assert sorted(path.name for path in tmp_path.iterdir()) == [checkpoint.name, 'interrupted-1', 'interrupted-2',
                                                                 'latest-rank0.pt']
    assert set_aside_interrupted(build_run(spec).interrupted) is None, 'nothing left to move'


def test_the_allow_list_refuses_a_module_before_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The command reads the allow-list from its environment and refuses before the module is imported (one
    process started here; the next test checks every field in this process); a listed module is built."""
    marker = tmp_path / 'RAN'
    overrides = [f'train_loader.dataset={{target: "os:system", kwargs: {{command: "touch {marker}"}}}}']
    env = {**os.environ, 'COMPOSER_SAMPLING_ALLOWED_MODULES': 'support.user_parts, my_company'}
    result = subprocess.run([COMMAND, 'train', DIGITS, *overrides], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert ("error: train_loader.dataset.target names the module 'os', which is not in "
            'COMPOSER_SAMPLING_ALLOWED_MODULES (support.user_parts, my_company); nothing of it was imported') \
        in result.stderr
    assert not marker.exists()
    monkeypatch.setenv('COMPOSER_SAMPLING_ALLOWED_MODULES', 'support.user_parts, my_company')
    allowed = ['train_loader.dataset={target: "support.user_parts:numbers", kwargs: {size: 200}}']
    assert _run('plan', allowed, capsys) == (0, '')


@pytest.mark.parametrize('field', ['train_loader.dataset', 'train_loader.sampler', 'model', 'optimizer', 'scheduler',
                                   'callbacks.mine', 'loggers.mine', 'algorithms.mine'])
def test_plan_and_train_refuse_a_module_off_the_allow_list_in_every_field(field: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``plan`` checks every target against the allow-list as ``train`` does, not only the data parts': exit 2,
    the same message, and the named callable never runs."""
    marker = tmp_path / 'RAN'
    monkeypatch.setenv('COMPOSER_SAMPLING_ALLOWED_MODULES', 'composer_sampling')
    override = f'{field}={{target: "os:system", kwargs: {{command: "touch {marker}"}}}}'
    results = {command: _run(command, [override], capsys) for command in ('plan', 'train')}
    assert results['plan'] == results['train'], results
    code, err = results['train']
    assert code == 2 and err.startswith(f"error: {field}.target names the module 'os', which is not in "
                                        'COMPOSER_SAMPLING_ALLOWED_MODULES (composer_sampling)'), err
    assert not marker.exists()


def test_the_allow_list_covers_checkpoints(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('COMPOSER_SAMPLING_ALLOWED_MODULES', 'support.user_parts')
    code, err = _run('train', ['load_path=/nowhere.pt', 'checkpoint_safe_globals=[decimal:Decimal]'], capsys)
    assert code == 2 and ("error: checkpoint_safe_globals[0] names the module 'decimal', which is not in "
                          'COMPOSER_SAMPLING_ALLOWED_MODULES (support.user_parts)') in err, err
    code, err = _run('train', ['load_path=/nowhere.pt', 'trust_checkpoint=true'], capsys)
    assert code == 2 and ('error: trust_checkpoint: true loads load_path unchecked, and unpickling it may import any '
                          'module, which COMPOSER_SAMPLING_ALLOWED_MODULES forbids') in err, err


def test_copying_a_recipe_never_writes_through_a_link_or_outside_the_folder(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / 'outside.txt'
    folder = tmp_path / 'recipes'
    folder.mkdir()
    (folder / 'digits.yaml').symlink_to(outside)  # dangling: the copy would create outside.txt
    assert main(['recipes', 'digits', '--to', str(folder)]) == 2
    assert 'is a symbolic link' in capsys.readouterr().err and not outside.exists()
    assert main(['recipes', 'digits', '--to', str(folder), '--force']) == 2
    assert not outside.exists()
    (folder / 'mixture.yaml').mkdir()
    assert main(['recipes', 'mixture', '--to', str(folder), '--force']) == 2
    assert 'is a folder; --force replaces a file only' in capsys.readouterr().err
    assert main(['recipes', 'digits', '--to', '/proc']) == 2
    assert 'error: --to /proc: ' in capsys.readouterr().err


class Touches:
    """Unpickling this calls ``exec``, which writes ``marker``: a pickle that needs only ``builtins.exec``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return exec, (f'open({str(self.marker)!r}, "w").write("ran")',)


@pytest.fixture()
def under_the_docs_allow_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``my_pkg`` importable and ``COMPOSER_SAMPLING_ALLOWED_MODULES=my_pkg,torch.optim``; returns the marker path."""
    monkeypatch.syspath_prepend(str(write_escapes_package(tmp_path)))
    monkeypatch.setenv('COMPOSER_SAMPLING_ALLOWED_MODULES', DOCS_ALLOW_LIST)
    return tmp_path / 'MARKER'


@pytest.mark.parametrize('target', ['my_pkg:os.system', 'my_pkg:system', 'my_pkg.sub:system', 'my_pkg:Runner.run',
                                    'my_pkg:shell', 'torch.optim:swa_utils.torch.os.system'])
def test_the_docs_allow_list_refuses_every_dotted_escape_and_nothing_runs(target: str, under_the_docs_allow_list: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    marker = under_the_docs_allow_list
    overrides = [f'train_loader.dataset={{target: "{target}", kwargs: {{command: "touch {marker}"}}}}']
    for command in ('plan', 'train'):
        code, err = _run(command, overrides, capsys)
        assert code == 2 and err.startswith(f"error: train_loader.dataset.target '{target}' is refused: "), err
        assert 'nothing it reached was called' in err
        assert not marker.exists()


def test_a_safe_global_reached_through_an_allowed_module_is_refused(under_the_docs_allow_list: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``my_pkg:exec`` is ``builtins.exec``: allowing it would let the weights-only check itself run the pickle."""
    marker = under_the_docs_allow_list
    path = tmp_path / 'evil.pt'
    torch.save({'state': {'model': Touches(marker)}}, path)
    for command in ('plan', 'train'):
        code, err = _run(command, [f'load_path={path}', 'checkpoint_safe_globals=[my_pkg:exec]'], capsys)
        assert code == 2 and err.startswith("error: checkpoint_safe_globals[0] 'my_pkg:exec' is refused: my_pkg:exec "
                                            "is exec of the module 'builtins'"), err
        assert not marker.exists()


@pytest.fixture(scope='module')
def evil_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp('evil')
    torch.save({'state': {'model': Touches(folder / 'MARKER')}, 'rng': []}, folder / 'evil.pt')
    return folder / 'evil.pt', folder / 'MARKER'


@pytest.mark.parametrize('callback', [
    'callbacks.load_checkpoint={load_path: "%s"}',
    'callbacks.mine={target: "composer.callbacks:LoadCheckpoint", kwargs: {load_path: "%s"}}',
], ids=['by-name', 'by-target'])
@pytest.mark.parametrize('allow_list', [None, 'composer'])
def test_a_callback_that_loads_a_checkpoint_is_checked_like_load_path(callback: str, allow_list: str | None,
                                                                      evil_checkpoint: tuple[Path, Path],
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, marker = evil_checkpoint
    if allow_list is not None:
        monkeypatch.setenv('COMPOSER_SAMPLING_ALLOWED_MODULES', allow_list)
    field = 'callbacks.load_checkpoint' if 'load_checkpoint=' in callback else 'callbacks.mine'
    code, err = _run('train', [callback % path], capsys)
    assert code == 2 and err.startswith(f'error: {field}.load_path: {path} needs builtins.exec'), err
    assert not marker.exists()


def test_a_callback_loading_its_checkpoint_trains_from_the_checked_copy(checkpoint: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    overrides = ['train_loader.dataset={name: synthetic, size: 400}', 'max_duration=4ba',
                 f'callbacks.load_checkpoint={{load_path: "{checkpoint}", load_weights_only: true}}']
    assert main(['train', DIGITS, *overrides]) == 0
    assert 'held-out after' in capsys.readouterr().out


def test_a_builder_returning_a_checkpoint_loader_is_refused(evil_checkpoint: tuple[Path, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path, marker = evil_checkpoint
    loader = f'callbacks.mine={{target: "support.user_parts:checkpoint_loader", kwargs: {{path: "{path}"}}}}'
    code, err = _run('train', [loader], capsys)
    assert code == 2 and err.startswith('error: callbacks.mine: the builder returned a LoadCheckpoint, which unpickles '
                                        'a checkpoint the check never saw'), err
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------------
# The three commands that read a recipe refuse a bad one alike: plan, train and python -m composer_sampling.train

ENTRY_POINTS: dict[str, Callable[[list[str]], int]] = {
    'plan': lambda args: main(['plan', *args]),
    'train': lambda args: main(['train', *args]),
    'python -m composer_sampling.train': train_main,
}


def _refusal(entry: str, args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``args`` through ``entry``; the one-line message of its exit 2 (no traceback)."""
    assert ENTRY_POINTS[entry](args) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and len(err.strip().splitlines()) == 1 and 'Traceback' not in err, err
    return err.strip().removeprefix('error: ')


@pytest.mark.parametrize(('text', 'problem'), [
    ('seed: 3\nmax_duration: [1ep\n',
     "line 3, column 1: did not find expected ',' or ']' (while parsing a flow sequence at line 2, column 15)"),
    ('seed: 3\n\tmax_duration: 1ep\n',
     'line 2, column 1: found a tab character that violates indentation (while scanning a plain scalar at line 1, '
     'column 7)'),
    ('seed: 3\nmax_duration: 1ep: 2\n', 'line 2, column 18: mapping values are not allowed in this context'),
])
@pytest.mark.parametrize('entry', list(ENTRY_POINTS))
def test_a_yaml_syntax_error_is_named_with_its_line_column_and_reason(
        entry: str, text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / 'recipe.yaml'
    path.write_text(text)
    assert _refusal(entry, [str(path)], capsys) == f'cannot read the recipe {path}: {problem}'


SCALAR_FIELDS = ['seed', 'max_duration', 'global_train_batch_size', 'run_name', 'save_interval', 'dist_timeout']


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from([*SCALAR_FIELDS, 'train_loader.num_workers', 'optimizer.lr']),
       before=st.lists(st.sampled_from(SCALAR_FIELDS), max_size=4, unique=True), between=st.integers(0, 3))
def test_a_duplicate_key_is_named_with_the_key_and_both_places(tmp_path: Path, key: str, before: list[str],
                                                                between: int) -> None:
    section, _, name = key.rpartition('.')
    indent = '  ' if section else ''
    filler = [f'{field}: null' if field == 'run_name' else f'# {field}' for field in before if field != name]
    lines = [*filler, *([f'{section}:'] if section else []), f'{indent}{name}: 1',
             *[f'{indent}# comment {k}' for k in range(between)], f'{indent}{name}: 2']
    path = tmp_path / 'duplicate.yaml'
    path.write_text('\n'.join(lines) + '\n')
    first = len(filler) + 1 + bool(section)  # 1-based line of the first occurrence
    top = next(k for k, line in enumerate(lines) if not line.startswith('#')) + 1  # where a mapping starts
    mapping = f'line {len(filler) + 2}, column 3' if section else f'line {top}, column 1'
    with pytest.raises(RecipeError) as refused:
        load_recipe(path)
    assert str(refused.value) == (f'cannot read the recipe {path}: line {first + between + 1}, column '
                                  f"{len(indent) + 1}: duplicate key {name!r} in the mapping at {mapping}; write "
                                  'each key once')


def test_a_duplicate_key_in_an_override_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    for entry in ENTRY_POINTS:
        assert _refusal(entry, [DIGITS, 'optimizer={name: adamw, lr: 0.1, lr: 0.2}'], capsys) == (
            "override 'optimizer={name: adamw, lr: 0.1, lr: 0.2}' cannot be read: duplicate key 'lr' in the mapping; "
            'write each key once')


@pytest.mark.parametrize('entry', list(ENTRY_POINTS))
def test_a_folder_given_as_the_recipe_is_named_as_a_folder(entry: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert _refusal(entry, [str(tmp_path)], capsys) == (
        f'the recipe {tmp_path} is a folder, not a YAML file; give the path of a recipe file')
    (tmp_path / 'mine.yaml').write_text('seed: 3\n')
    assert _refusal(entry, [str(tmp_path), 'seed=4'], capsys) == (
        f'the recipe {tmp_path} is a folder, not a YAML file (it holds mine.yaml); give the path of a recipe file')


@pytest.mark.parametrize('where', ['before the recipe', 'after the recipe', 'between overrides', 'after overrides'])
@pytest.mark.parametrize('entry', list(ENTRY_POINTS))
def test_verbose_is_taken_anywhere_by_every_command(entry: str, where: str, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv('COMPOSER_SAMPLING_VERBOSE', '0')  # restored after the test: --verbose sets it
    overrides = ['max_duration=1ba', 'train_loader.dataset={target: "support.user_parts:failing", kwargs: {size: 10}}']
    at = {'before the recipe': 0, 'after the recipe': 1, 'between overrides': 2, 'after overrides': 3}[where]
    args = [DIGITS, *overrides]
    args.insert(at, '--verbose')
    assert ENTRY_POINTS[entry](args) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: train_loader.dataset: support.user_parts:failing raised ValueError: no sample 10 '
                          'in this folder\nTraceback (most recent call last)'), err


@pytest.mark.parametrize('flag', ['--help', '-h'])
@pytest.mark.parametrize('entry', list(ENTRY_POINTS))
def test_help_is_taken_by_every_command(entry: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    for args in ([flag], [DIGITS, flag], [DIGITS, 'seed=3', flag]):
        with pytest.raises(SystemExit) as exited:
            ENTRY_POINTS[entry](args)
        out = capsys.readouterr().out
        assert exited.value.code == 0 and 'recipe' in out and '[overrides ...]' in out and '--verbose' in out, out
