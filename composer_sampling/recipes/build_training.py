"""A resolved recipe built for this process (:func:`build_run`, then the ``Trainer``), or for every rank to plan.

:func:`prepare` is the one pass of checks that ``plan`` and ``train`` both run.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> run = build_run(resolve(load_recipe(None, ['train_loader.dataset={name: synthetic, size: 100}'])))
    >>> len(run.train_dataset), run.device, run.summary.splitlines()[0]
    (80, 'cpu', 'composer-sampling run summary')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader, Dataset

from composer_sampling._checkpoint.save_folder import LaterCheckpoints
from composer_sampling.batching import BatchSizes
from composer_sampling.recipes.build_composer_parts import TrainerParts, build_trainer_parts, summary_rows
from composer_sampling.recipes.build_data import Placement, build_data, build_eval_loader, build_train_loader
from composer_sampling.recipes.checkpoints import CheckedCheckpoint
from composer_sampling.recipes.checks import Checked
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import RunFolders
from composer_sampling.recipes.resolve import RunSpec, resolve
from composer_sampling.recipes.run_fields import check_parallelism_fields, machine_device
from composer_sampling.recipes.schema import Recipe

if TYPE_CHECKING:
    from composer import Trainer

    from composer_sampling._graph.snapshot import GraphSnapshot
    from composer_sampling._proofs.plan import PlanReport

__all__ = ['Prepared', 'Run', 'build_run', 'build_trainer', 'check_train_graph', 'plan_recipe', 'prepare']


@dataclass
class Run:
    """Everything a recipe builds before training starts."""

    spec: RunSpec
    batch_sizes: BatchSizes
    train_dataset: Dataset
    eval_dataset: Dataset
    train_loader: DataLoader
    eval_loader: DataLoader
    checked: Checked | None = None  # the checkpoints the recipe names, checked, and the copies Composer loads
    device: str = 'cpu'  # the device this machine trains on: cpu, gpu or mps
    interrupted: LaterCheckpoints | None = None  # what a save cut short left after the latest checkpoint resumed
    graph: GraphSnapshot | None = None  # the train loader's graph, walked once for the summary and the sharding check
    complete: str | None = None  # autoresume's latest checkpoint has trained all of max_duration (Prepared.complete)

    @property
    def checked_checkpoints(self) -> Mapping[str, CheckedCheckpoint] | None:
        """The checkpoints the recipe names, checked, by field; None when nothing was checked."""
        return self.checked.checkpoints if self.checked is not None else None

    @property
    def summary(self) -> str:
        """The run summary that rank 0 prints before training, of the train loader the Trainer gets."""
        from composer_sampling._proofs.summary import summarize

        resumed = self.checked.checkpoint_seed if self.checked is not None else None
        return summarize(self.train_loader, batch_sizes=self.batch_sizes,
                         data_seed=self.spec.sync.data_seed if resumed is None else resumed,
                         seed_source=self.spec.sync.seed_source if resumed is None else
                         "the checkpoint's, at load_path", graph=self.graph,
                         run_rows=summary_rows(self.spec, self.device, self.checked_checkpoints))


@dataclass(frozen=True)
class Prepared:
    """What the checks that both commands run found (:func:`prepare`)."""

    spec: RunSpec  # with autoresume's checkpoint as its load_path
    checked: Checked
    folders: RunFolders
    later: LaterCheckpoints | None  # what the save folder holds after the checkpoint a resume loads
    complete: str | None = None  # autoresume's latest checkpoint has trained all of max_duration: what it trained
    remote_refusal: str | None = None  # rank 0's refusal of a remote folder, raised by every rank once a group exists

    @property
    def data_seed(self) -> int:
        """The data seed in effect: the checkpoint's after a resume, else the recipe's."""
        seed = self.checked.checkpoint_seed
        return self.spec.sync.data_seed if seed is None else seed


def prepare(spec: RunSpec, world_size: int, copy_checkpoints: bool = True) -> Prepared:
    """The checks that ``plan`` and ``train`` run alike on ``world_size`` ranks; a :class:`RecipeError` names the field.

    Nothing is moved or written; checkpoints are copied for Composer with ``copy_checkpoints`` (``train``).
    """
    from composer_sampling.recipes.autoresume import autoresumed
    from composer_sampling.recipes.checks import checked_spec
    from composer_sampling.recipes.folders import check_save_folders, run_folders, saved_after
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
    later = None if resumed is None else saved_after(spec.recipe, folders, resumed.path, resumed.trained)
    check_save_folders(spec.recipe, spec.ledger_folder, folders, later,
                       'load_path' if spec.load_path_field == 'load_path' else 'autoresume')
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

    recipe = run.spec.recipe
    if parts is None:
        parts = build_trainer_parts(run.spec, run.checked_checkpoints)
    checked = (run.checked_checkpoints or {}).get('load_path')  # Composer loads the checked copy, if not trusted
    same = ('eval_interval', 'max_duration', 'scale_schedule_ratio', 'precision', 'parallelism_config', 'seed',
            'save_folder', 'save_interval', 'save_overwrite', 'run_name', 'dist_timeout')  # as the recipe sets them
    arguments: dict[str, Any] = {
        **{name: getattr(recipe, name) for name in same},
        **parts.console,  # progress_bar, log_to_console, console_log_interval
        'model': parts.model,
        'optimizers': parts.optimizer,
        'schedulers': parts.schedulers,
        'loggers': parts.loggers,
        'algorithms': parts.algorithms,
        'callbacks': [*parts.callbacks, *overrides.pop('callbacks', [])],
        'train_dataloader': run.train_loader,
        'eval_dataloader': run.eval_loader,
        'device': run.device,
        'device_train_microbatch_size': run.batch_sizes.microbatch,
        'save_num_checkpoints_to_keep': -1,
        'load_path': checked.load_path if checked is not None else recipe.load_path,
        'load_progress_bar': False,
    }
    return Trainer(**{**arguments, **overrides})


def build_run(spec: RunSpec, world_size: int | None = None, rank: int | None = None, device: str | None = None) -> Run:
    """Check and build everything for this process but the Trainer; raises :class:`RecipeError` before training.

    ``plan``'s checks come first, then the device; the process group starts before any builder is called.
    """
    from composer.utils import dist, get_device

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
    data = build_data(spec, batch_sizes)
    held_out = build_eval_loader(spec, data.held_out)
    where = Placement(batch_sizes.data_parallel, rank // batch_sizes.replication, prepared.data_seed)
    train = build_train_loader(spec, data.train, batch_sizes, where)
    graph = check_train_graph(spec, checked, train, world_size, rank)
    return Run(spec, batch_sizes, data.train, data.held_out, train, held_out, checked, device,
               later if later is not None and later.interrupted else None, graph, prepared.complete)


def plan_recipe(recipe: Recipe, world_size: int, epochs: int, proof: str = 'auto',
                workers: int | None = None) -> PlanReport:
    """``composer-sampling plan``: build every rank's train loader for ``world_size`` and check ``epochs`` epochs.

    The recipe is checked by ``train``'s own pass. ``proof`` and ``workers`` are
    :func:`~composer_sampling.check_plan`'s.

    Example:
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> report = plan_recipe(load_recipe(None, ['global_train_batch_size=64']), world_size=4, epochs=1)
        >>> report.ok, report.epochs[0].missing
        (True, 0)
    """
    from composer_sampling._proofs.plan import plan_loaders

    prepared = prepare(resolve(recipe), world_size, copy_checkpoints=False)
    spec, checked, seed = prepared.spec, prepared.checked, prepared.data_seed
    if prepared.complete is not None:
        print(f'note: {spec.load_path_field}: {prepared.complete}; train would say the run is complete and train '
              'nothing', flush=True)
    batch_sizes = checked.batch_sizes
    data = build_data(spec, batch_sizes)
    # One loader per data-parallel rank; with replication R, ranks r and r' of one group share loader r // R.
    loaders = [build_train_loader(spec, data.train, batch_sizes, Placement(batch_sizes.data_parallel, rank, seed))
               for rank in range(batch_sizes.data_parallel)]
    check_train_graph(spec, checked, loaders[0], world_size, 0)
    rank_loaders = [loaders[rank // batch_sizes.replication] for rank in range(world_size)]
    return plan_loaders(batch_sizes, seed, rank_loaders, epochs, proof=proof, workers=workers)


def check_train_graph(spec: RunSpec, checked: Checked, loader: DataLoader, world_size: int,
                      rank: int) -> GraphSnapshot:
    """The graph of the train loader of ``rank``, walked once; refused unless it shards as ``world_size`` ranks need
    and keeps the order and data of the checkpoint at ``load_path``, as ``SamplerSync`` would refuse them (the
    checks of :meth:`DataOrder.check <composer_sampling.DataOrder.check>`)."""
    from composer_sampling._graph.snapshot import take_snapshot
    from composer_sampling.data_order import DataOrder
    from composer_sampling.errors import DataOrderError

    order = DataOrder(loader, allow_data_change=spec.sync.allow_data_change,
                      replication=checked.batch_sizes.replication)
    problem = order.sharding_problem(world_size, rank)
    if problem is not None:
        raise RecipeError(f'train_loader.sampler ({spec.sampler.label}): {problem}')
    resumed = checked.checkpoints.get('load_path')
    if resumed is not None and resumed.sync_state is not None:
        try:
            order.load_state_dict(resumed.sync_state, reader='Composer SamplerSync')
            order.check_checkpoint()
        except DataOrderError as error:
            raise RecipeError(str(error)) from None
    return take_snapshot(loader)
