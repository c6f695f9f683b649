"""A resolved recipe built for this process: :func:`build_run` (everything but the Trainer), then the ``Trainer``.

:func:`prepare` is the one pass of checks ``plan`` and ``train`` both run; ``train`` runs it inside
:func:`build_run`, then builds the loaders and one snapshot of the train loader's graph.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> run = build_run(resolve(load_recipe(None, ['train_loader.dataset={name: synthetic, size: 100}'])))
    >>> len(run.train_dataset), run.device, run.summary.splitlines()[0]
    (80, 'cpu', 'composer-sampling run summary')
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader, Dataset

from composer_sampling.batching import BatchSizes
from composer_sampling.recipes.build_composer_parts import TrainerParts, build_trainer_parts, summary_rows
from composer_sampling.recipes.checkpoints import CheckedCheckpoint
from composer_sampling.recipes.checks import Checked
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import LaterCheckpoints, RunFolders
from composer_sampling.recipes.resolve import RunSpec
from composer_sampling.recipes.run_fields import check_parallelism_fields, machine_device

if TYPE_CHECKING:
    from composer import Trainer

    from composer_sampling._graph.snapshot import GraphSnapshot

__all__ = ['Prepared', 'Run', 'build_run', 'build_trainer', 'check_resumed_order', 'check_sharding', 'prepare']


@dataclass
class Run:
    """Everything a recipe builds before training starts."""

    spec: RunSpec
    batch_sizes: BatchSizes
    train_dataset: Dataset
    eval_dataset: Dataset
    train_loader: DataLoader
    eval_loader: DataLoader
    checked: Checked | None = None  # the checkpoints the recipe names, checked (and the copies Composer loads)
    device: str = 'cpu'  # the device this machine trains on: cpu, gpu or mps (machine_device)
    interrupted: LaterCheckpoints | None = None  # what a save cut short left after the latest checkpoint resumed
    graph: GraphSnapshot | None = None  # the train loader's graph, walked once (the summary and the sharding check)
    complete: str | None = None  # autoresume's latest checkpoint has trained all of max_duration (Prepared.complete)

    @property
    def checked_checkpoints(self) -> Mapping[str, CheckedCheckpoint] | None:
        """The checkpoints the recipe names, checked, by field; None when nothing was checked."""
        return self.checked.checkpoints if self.checked is not None else None

    @property
    def checkpoint_seed(self) -> int | None:
        """The data seed of the checkpoint at load_path, when it could be read."""
        return self.checked.checkpoint_seed if self.checked is not None else None

    @property
    def load_path(self) -> str | None:
        """What Composer's ``load_path`` receives: the checked copy of the recipe's file, or its value if trusted."""
        checked = (self.checked_checkpoints or {}).get('load_path')
        return checked.load_path if checked is not None else self.recipe.load_path

    @property
    def recipe(self) -> Any:
        return self.spec.recipe

    @property
    def data_seed(self) -> int:
        """The data seed in effect: the checkpoint's after a resume, else the recipe's."""
        return self.checkpoint_seed if self.checkpoint_seed is not None else self.spec.sync.data_seed

    @property
    def seed_source(self) -> str:
        return 'the checkpoint\'s, at load_path' if self.checkpoint_seed is not None else self.spec.sync.seed_source

    @property
    def summary(self) -> str:
        """The run summary rank 0 prints before training, of the train loader the Trainer gets."""
        from composer_sampling._proofs.summary import summarize

        return summarize(self.train_loader, batch_sizes=self.batch_sizes, data_seed=self.data_seed,
                         seed_source=self.seed_source, graph=self.graph,
                         run_rows=summary_rows(self.spec, self.device, self.checked_checkpoints))


@dataclass(frozen=True)
class Prepared:
    """What the checks both commands run found (:func:`prepare`)."""

    spec: RunSpec  # with autoresume's checkpoint as its load_path
    checked: Checked
    folders: RunFolders
    later: LaterCheckpoints | None  # what the save folder holds after the checkpoint a resume loads
    complete: str | None = None  # autoresume's latest checkpoint has trained all of max_duration: what it trained
    remote_refusal: str | None = None  # rank 0's refusal of a remote folder, raised by every rank once a group exists


def prepare(spec: RunSpec, world_size: int, copy_checkpoints: bool = True) -> Prepared:
    """The checks ``plan`` and ``train`` run alike on ``world_size`` ranks; a :class:`RecipeError` names the field.

    Nothing is moved or written; checkpoints are copied for Composer with ``copy_checkpoints`` (``train``).
    """
    from composer_sampling.recipes.autoresume import autoresumed
    from composer_sampling.recipes.checks import checked_spec
    from composer_sampling.recipes.folders import check_save_folders, later_checkpoints, run_folders
    from composer_sampling.recipes.logger_paths import check_logger_paths
    from composer_sampling.recipes.remote_folders import remote_refusal

    check_parallelism_fields(spec.recipe.parallelism_config)
    folders = run_folders(spec.recipe, spec.ledger_folder, spec.run_name)
    recipe = autoresumed(spec.recipe, folders)  # the latest checkpoint, checked as load_path is
    if recipe.load_path != spec.recipe.load_path:
        spec = replace(spec, recipe=recipe, load_path_field=f'autoresume (the latest checkpoint in save_folder '
                                                            f'{folders.save})')
    checked = checked_spec(spec, world_size, copy_checkpoints)
    resumed = checked.checkpoints.get('load_path')
    later = later_checkpoints(spec.recipe, folders, None if resumed is None else resumed.path)
    check_save_folders(spec.recipe, spec.ledger_folder, folders, later)
    check_logger_paths(spec)
    complete = _complete(spec, resumed)
    if complete is not None and spec.load_path_field == 'load_path':
        raise RecipeError(f'load_path: {complete}: nothing would train (Composer would stop with a ValueError); '
                          'raise max_duration to train further, or load an earlier checkpoint')
    refusal = remote_refusal(spec, folders, None if resumed is None else resumed.path)  # raised at once on one rank
    return Prepared(spec, checked, folders, later, complete, refusal)


#: Composer's names of the units of a duration, as a checkpoint's Timestamp holds them.
_TRAINED = {'ep': 'epoch', 'ba': 'batch', 'sp': 'sample', 'tok': 'token', 'iter': 'iteration'}


def _complete(spec: RunSpec, resumed: CheckedCheckpoint | None) -> str | None:
    """What the resumed checkpoint has trained when that is all of the scaled ``max_duration``, else ``None``."""
    value, unit = spec.durations['max_duration']
    name = _TRAINED.get(unit)
    if resumed is None or name is None or name not in resumed.trained:
        return None
    total = int(value * spec.recipe.scale_schedule_ratio)
    if resumed.trained[name] < total:
        return None
    shown = ', '.join(f'{key} {resumed.trained[key]}' for key in ('epoch', 'batch', 'sample') if key in resumed.trained)
    return (f'the checkpoint {resumed.path} has trained {resumed.trained[name]}{unit} ({shown}), all of '
            f'max_duration={spec.recipe.max_duration!r}' + (f' scaled by {spec.recipe.scale_schedule_ratio:g}'
                                                             if total != value else ''))


def build_trainer(run: Run, parts: TrainerParts | None = None, **overrides: Any) -> Trainer:
    """The run's ``Trainer`` of ``parts`` (built here when None); ``overrides`` go straight to ``Trainer``.

    ``autoresume`` is not passed: :func:`build_run` gave its checked checkpoint to ``load_path``.
    """
    from composer import Trainer

    recipe = run.recipe
    if parts is None:
        parts = build_trainer_parts(run.spec, run.checked_checkpoints)
    extra_callbacks = list(overrides.pop('callbacks', []))
    arguments: dict[str, Any] = {
        'model': parts.model,
        'train_dataloader': run.train_loader,
        'eval_dataloader': run.eval_loader,
        'eval_interval': recipe.eval_interval,
        'max_duration': recipe.max_duration,
        'optimizers': parts.optimizer,
        'schedulers': parts.schedulers,
        'scale_schedule_ratio': recipe.scale_schedule_ratio,
        'loggers': parts.loggers,
        'algorithms': parts.algorithms,
        **parts.console,  # progress_bar, log_to_console, console_log_interval
        'device': run.device,
        'precision': recipe.precision,
        'parallelism_config': recipe.parallelism_config,
        'device_train_microbatch_size': run.batch_sizes.microbatch,
        'seed': recipe.seed,
        'callbacks': [*parts.callbacks, *extra_callbacks],
        'save_folder': recipe.save_folder,
        'save_interval': recipe.save_interval,
        'save_overwrite': recipe.save_overwrite,
        'save_num_checkpoints_to_keep': -1,
        'load_path': run.load_path,
        'run_name': recipe.run_name,
        'dist_timeout': recipe.dist_timeout,
        'load_progress_bar': False,
    }
    arguments.update(overrides)
    return Trainer(**arguments)


def build_run(spec: RunSpec, world_size: int | None = None, rank: int | None = None, device: str | None = None) -> Run:
    """Check and build everything for this process but the Trainer; raises :class:`RecipeError` before training.

    ``plan``'s checks come first, then the device; the process group starts before any builder is called.
    """
    from composer.utils import dist, get_device

    from composer_sampling._graph.snapshot import take_snapshot
    from composer_sampling.recipes.build_data import Placement, build_loaders
    from composer_sampling.recipes.remote_folders import share_refusal

    world_size = dist.get_world_size() if world_size is None else world_size  # the launcher's, before any group
    prepared = prepare(spec, world_size)  # plan's checks first: a recipe both refuse gets the same message
    spec, checked, later = prepared.spec, prepared.checked, prepared.later
    recipe = spec.recipe
    device = machine_device(recipe.device, recipe.precision, recipe.parallelism_config) if device is None else device
    if dist.get_world_size() > 1:  # as the Trainer does: one process needs no group
        # The group's backend follows the device the Trainer gets (NCCL on GPUs, gloo on the CPU), as Composer picks it.
        dist.initialize_dist(get_device(device), recipe.dist_timeout)
    share_refusal(spec, prepared.folders, prepared.remote_refusal)  # rank 0's verdict on a remote folder, for all
    rank = dist.get_global_rank() if rank is None else rank
    batch_sizes = checked.batch_sizes
    seed = checked.checkpoint_seed if checked.checkpoint_seed is not None else spec.sync.data_seed
    loaders = build_loaders(spec, batch_sizes, Placement(batch_sizes.data_parallel, rank // batch_sizes.replication,
                                                         seed))
    graph = take_snapshot(loaders.train)
    check_sharding(spec, graph, world_size, rank, batch_sizes.replication)
    check_resumed_order(checked, graph, spec.sync.allow_data_change)
    return Run(spec, batch_sizes, loaders.data.train, loaders.data.held_out, loaders.train, loaders.held_out, checked,
               device, later if later is not None and later.interrupted else None, graph, prepared.complete)


def check_resumed_order(checked: Checked, graph: GraphSnapshot, allow_data_change: bool = False) -> None:
    """The train loader's order and data against the checkpoint at ``load_path``, refused as ``SamplerSync`` would."""
    from composer_sampling._fingerprint import dataset_fingerprint
    from composer_sampling._resume.data_identity import check_data
    from composer_sampling._resume.decide import ResumeRefusedError
    from composer_sampling._resume.loaded import LoadedSync

    resumed = checked.checkpoints.get('load_path')
    if resumed is None or resumed.sync_state is None:
        return
    try:
        loaded = LoadedSync.read(resumed.sync_state, error=ValueError)
        loaded.check_graph(graph.signatures())
        if loaded.fingerprint is not None:  # an older checkpoint's note is SamplerSync's, at fit start
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')  # SamplerSync says allow_data_change's warning at fit start
                check_data(loaded.fingerprint, dataset_fingerprint(graph.loader.dataset), allow_data_change)
    except ResumeRefusedError as error:
        raise RecipeError(str(error)) from None


def check_sharding(spec: RunSpec, graph: GraphSnapshot, world_size: int, rank: int, replication: int) -> None:
    """The train loader of ``rank`` shards by rank as ``world_size`` ranks need, else a :class:`RecipeError`."""
    from composer_sampling._graph.walk import sharding_problem

    problem = sharding_problem(graph.root, world_size, rank, replication, nodes=graph.active)
    if problem is not None:
        raise RecipeError(f'train_loader.sampler ({spec.sampler.label}): {problem}')
