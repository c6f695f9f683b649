"""Composer's schedulers, loggers and algorithms in a recipe: Composer's own classes, trained through a real run.

The tables of :mod:`composer_sampling.recipes.composer_names` are held to Composer's
``__all__`` and signatures; every run is a real CPU ``Trainer`` on a tiny synthetic set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import time
from pathlib import Path
from typing import Any

import composer.algorithms
import composer.loggers
import composer.optim
import pytest
import torch
from composer.core import Algorithm, Callback, State
from composer.loggers import Logger, LoggerDestination

from composer_sampling.recipes import composer_names
from composer_sampling.recipes.registry import SCHEDULERS
from composer_sampling.recipes.runner import train
from composer_sampling.recipes.schema import load_recipe

ROOT = Path(__file__).resolve().parents[2]
TINY = ['train_loader.dataset={name: synthetic, size: 400}', 'eval_interval=100ep']  # 5 steps of 64 an epoch


def _times(cls: type) -> tuple[set[str], set[str]]:
    """The required and optional arguments of a scheduler's ``__init__`` that take a Composer ``Time``."""
    required, optional = set(), set()
    for name, parameter in inspect.signature(cls).parameters.items():
        if 'Time' in str(parameter.annotation):
            (required if parameter.default is inspect.Parameter.empty else optional).add(name)
    return required, optional


def test_the_scheduler_table_is_composers_schedulers_with_their_time_arguments() -> None:
    classes = {name for name in composer.optim.__all__ if name.endswith('Scheduler') and name != 'ComposerScheduler'}
    assert {cls for cls, _, _ in composer_names.SCHEDULERS.values()} == classes
    for name, (cls, required, optional) in composer_names.SCHEDULERS.items():
        assert _times(getattr(composer.optim, cls)) == (set(required), set(optional)), name
        assert set(SCHEDULERS.entry(name).required) == set(required)


def test_the_logger_and_algorithm_tables_are_composers() -> None:
    loggers = {name for name in composer.loggers.__all__
               if inspect.isclass(cls := getattr(composer.loggers, name)) and issubclass(cls, LoggerDestination)
               and cls is not LoggerDestination}
    assert set(composer_names.LOGGERS.values()) == loggers
    algorithms = {name for name in composer.algorithms.__all__
                  if inspect.isclass(cls := getattr(composer.algorithms, name)) and issubclass(cls, Algorithm)}
    assert set(composer_names.ALGORITHMS.values()) == algorithms
    for name, cls in composer_names.ALGORITHMS.items():  # named as Composer's subpackage holding the class
        assert getattr(composer.algorithms, cls).__module__.split('.')[2] == name
    assert set(composer_names.REFUSED_ALGORITHMS) <= set(composer_names.ALGORITHMS)


class LearningRates(Callback):
    """The LR Composer set after each step, and Composer's scheduler evaluated on the state it stepped at."""

    def __init__(self, scheduler: Any = None) -> None:
        self.scheduler = scheduler
        self.set: list[float] = []
        self.expected: list[float] = []
        self.losses: list[float] = []

    def after_train_batch(self, state: State, logger: Logger) -> None:
        if self.scheduler is not None:  # the state Composer's schedulers are stepped at, before the batch count moves
            self.expected.append(state.optimizers[0].param_groups[0]['initial_lr'] * self.scheduler(state))

    def batch_end(self, state: State, logger: Logger) -> None:
        self.set.append(state.optimizers[0].param_groups[0]['lr'])
        self.losses.append(float(state.loss))  # type: ignore[arg-type]


@pytest.mark.parametrize(('override', 'scheduler'), [
    ('scheduler={name: cosine_annealing_with_warmup, t_warmup: 3ba, alpha_f: 0.1}',
     composer.optim.CosineAnnealingWithWarmupScheduler(t_warmup='3ba', alpha_f=0.1)),
    ('schedulers=[{name: multi_step, milestones: [2ba, 0.5dur], gamma: 0.5}]',
     composer.optim.MultiStepScheduler(milestones=['2ba', '0.5dur'], gamma=0.5)),
], ids=['cosine_annealing_with_warmup', 'multi_step'])
def test_a_schedule_sets_the_lr_as_composers_scheduler_computes_it(override: str, scheduler: Any) -> None:
    recorded = LearningRates(scheduler)
    train(load_recipe(None, [*TINY, 'max_duration=8ba', override]), callbacks=[recorded])
    assert len(recorded.set) == 8 and len(set(recorded.set)) > 2, recorded.set  # the LR moved
    assert recorded.set == pytest.approx(recorded.expected, rel=1e-12, abs=0)


def test_scale_schedule_ratio_reaches_the_trainer() -> None:
    recorded = LearningRates()
    result = train(load_recipe(None, [*TINY, 'max_duration=8ba', 'scale_schedule_ratio=0.5',
                                      'scheduler={name: linear, t_max: 8ba}']), callbacks=[recorded])
    duration = result.trainer.state.max_duration
    assert len(recorded.set) == 4 and duration is not None and (duration.value, duration.unit.value) == (4, 'ba')
    assert recorded.set[-1] == pytest.approx(0.003 * (1 - 3 / 4))  # linear over t_max * 0.5 = 4 batches


def test_label_smoothing_trains_with_smoothed_targets() -> None:
    plain, smoothed = LearningRates(), LearningRates()
    train(load_recipe(None, [*TINY, 'max_duration=2ba']), callbacks=[plain])
    result = train(load_recipe(None, [*TINY, 'max_duration=2ba',
                                      'algorithms.label_smoothing={smoothing: 0.5, target_key: target}']),
                   callbacks=[smoothed])
    assert [type(algorithm).__name__ for algorithm in result.trainer.state.algorithms] == ['LabelSmoothing']
    # the same first batch and weights: only the targets differ, and a smoothed target costs more to fit
    assert smoothed.losses[0] > plain.losses[0] and smoothed.losses[0] != pytest.approx(plain.losses[0])


def test_gradient_clipping_changes_the_weights() -> None:
    runs = [train(load_recipe(None, [*TINY, 'max_duration=2ba', *extra])) for extra in
            ([], ['algorithms.gradient_clipping={clipping_type: value, clipping_threshold: 1e-6}'])]
    plain, clipped = (dict(run.trainer.state.model.named_parameters()) for run in runs)
    assert any(not torch.equal(plain[name], clipped[name]) for name in plain)


@pytest.fixture(scope='module')
def logged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of 3 batches with Composer's FileLogger, MLFlowLogger (a local file: store) and WandBLogger (offline)."""
    folder = tmp_path_factory.mktemp('loggers')
    loggers = {'file': {'filename': str(folder / 'log.txt')}}
    if importlib.util.find_spec('mlflow') is not None:
        loggers['mlflow'] = {'tracking_uri': f'file://{folder}/mlruns', 'experiment_name': 'recipe',
                             'synchronous': True, 'log_system_metrics': False}
    if importlib.util.find_spec('wandb') is not None:
        loggers['wandb'] = {'project': 'recipe', 'init_kwargs': {'dir': str(folder), 'mode': 'offline'}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('WANDB_MODE', 'offline')
        patch.setenv('WANDB_DIR', str(folder))
        patch.setenv('WANDB_SILENT', 'true')
        recorded = LearningRates()
        text = json.dumps(loggers)
        train(load_recipe(None, [*TINY, 'max_duration=3ba', f'loggers={text}']), callbacks=[recorded])
    return {'folder': folder, 'losses': recorded.losses}


def test_the_file_logger_holds_the_loss_of_every_batch(logged: dict[str, Any]) -> None:
    lines = [line for line in (logged['folder'] / 'log.txt').read_text().splitlines() if 'loss/train/total' in line]
    assert len(lines) == 3
    assert [float(line.rsplit(':', 1)[1]) for line in lines] == pytest.approx(logged['losses'], abs=5e-5)  # 4 places


def test_mlflow_reads_back_the_runs_metrics(logged: dict[str, Any]) -> None:
    mlflow = pytest.importorskip('mlflow', reason='mlflow is not installed (it comes with llm-foundry)')
    mlflow.set_tracking_uri(f'file://{logged["folder"]}/mlruns')
    runs = mlflow.search_runs(experiment_names=['recipe'])
    assert len(runs) == 1
    assert runs['metrics.loss/train/total'][0] == pytest.approx(logged['losses'][-1], rel=1e-5)
    history = mlflow.MlflowClient().get_metric_history(runs['run_id'][0], 'loss/train/total')
    assert [metric.value for metric in sorted(history, key=lambda m: m.step)] == pytest.approx(logged['losses'])


def _wandb_history(path: Path, key: str) -> list[float]:
    """The values of ``key`` in the history records of an offline run's ``.wandb`` file, read with wandb's reader."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    store = DataStore()
    store.open_for_scan(str(path))
    values = []
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof('record_type') == 'history':
            values += [float(item.value_json) for item in record.history.item
                       if (item.key or '/'.join(item.nested_key)) == key]
    return values


def test_wandb_offline_holds_the_runs_metrics(logged: dict[str, Any]) -> None:
    pytest.importorskip('wandb', reason='wandb is not installed')
    runs = list(logged['folder'].glob('wandb/offline-run-*/run-*.wandb'))
    assert len(runs) == 1, sorted(str(path) for path in logged['folder'].rglob('*'))
    # wandb's own service process writes the file, and on a loaded machine may still be writing it after the run
    # has finished: read it again until it holds every batch, for at most a minute
    deadline, history = time.monotonic() + 60, []
    while time.monotonic() < deadline:
        with contextlib.suppress(AssertionError):  # the reader's check of a header not written yet
            history = _wandb_history(runs[0], 'loss/train/total')
        if len(history) >= len(logged['losses']):
            break
        time.sleep(0.5)
    assert history == pytest.approx(logged['losses'], rel=1e-6)


def test_the_progress_bar_shows_by_default_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import os
    import sys

    from composer_sampling.recipes.build_composer_parts import show_progress_bar

    leader, follower = os.openpty()
    with open(follower, 'w') as terminal:
        recipe = load_recipe(None)
        for stdout, stderr, shown in [(terminal, terminal, True), (io.StringIO(), terminal, False),
                                      (terminal, io.StringIO(), False)]:
            monkeypatch.setattr(sys, 'stdout', stdout)
            monkeypatch.setattr(sys, 'stderr', stderr)
            assert show_progress_bar(recipe) is shown
            assert show_progress_bar(load_recipe(None, ['progress_bar=false'])) is False
    os.close(leader)
