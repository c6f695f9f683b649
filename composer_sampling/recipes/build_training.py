"""The training side of a resolved recipe: callbacks, model, optimizer and the ``Trainer`` (Composer imported here).

Composer's schedulers, loggers and algorithms come from
:mod:`~composer_sampling.recipes.build_composer_parts`.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> [type(callback).__name__ for callback in build_callbacks(resolve(load_recipe(None)))]
    ['SamplerSync']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset

from composer_sampling.batching import BatchSizes
from composer_sampling.recipes.build_composer_parts import (
    ComposerParts,
    build_composer_parts,
    built,
    console_arguments,
    summary_rows,
)
from composer_sampling.recipes.checkpoints import CheckedCheckpoint, checkpoint_argument_of
from composer_sampling.recipes.checks import Checked
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import RunSpec
from composer_sampling.recipes.run_fields import machine_device

if TYPE_CHECKING:
    from composer import Trainer
    from composer.core import Callback
    from composer.models import ComposerModel

__all__ = ['Run', 'build_callbacks', 'build_model', 'build_optimizer', 'build_run', 'build_trainer',
           'check_model_shapes', 'run_rows']


@dataclass
class Run:
    """Everything a recipe builds before training starts."""

    spec: RunSpec
    batch_sizes: BatchSizes
    train_dataset: Dataset
    eval_dataset: Dataset
    train_loader: DataLoader
    eval_loader: DataLoader
    callbacks: list[Callback] = field(default_factory=list)
    checked: Checked | None = None  # the checkpoints the recipe names, checked (and the copies Composer loads)
    composer_parts: ComposerParts | None = None  # the schedulers, loggers and algorithms (built here when None)
    device: str = 'cpu'  # the device this machine trains on: cpu, gpu or mps (machine_device)

    @property
    def checkpoint_seed(self) -> int | None:
        """The data seed of the checkpoint at load_path, when it could be read."""
        return self.checked.checkpoint_seed if self.checked is not None else None

    @property
    def load_path(self) -> str | None:
        """What Composer's ``load_path`` receives: the checked copy of the recipe's file, or its value if trusted."""
        checked = self.checked.checkpoints.get('load_path') if self.checked is not None else None
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


def build_callbacks(spec: RunSpec, checkpoints: Mapping[str, CheckedCheckpoint] | None = None) -> list[Callback]:
    """Instantiate the recipe's callbacks; a ledger without a folder gets the one resolution derived.

    A callback that unpickles a checkpoint receives the checked copy in its
    checkpoint argument (``checkpoints``, by field); one whose builder returns such a
    callback unseen by the check is refused.
    """
    from composer.core import Callback

    checkpoints = checkpoints or {}
    callbacks = []
    for part in spec.callbacks:
        extra = {}
        if part.entry is not None and part.entry.ledger_folder and part.arguments.get('folder') is None:
            extra['folder'] = spec.ledger_folder
        handed = {name.rpartition('.')[2]: checked.load_path for name, checked in checkpoints.items()
                  if name.rpartition('.')[0] == part.field}
        if handed:
            part = replace(part, arguments={**part.arguments, **handed})
        callback = built(part, lambda made: isinstance(made, Callback), 'a composer.core.Callback', extra)
        if not handed and checkpoint_argument_of(type(callback)) is not None:
            raise RecipeError(f'{part.field}: the builder returned a {type(callback).__name__}, which unpickles a '
                              'checkpoint the check never saw; name it by its class (name: load_checkpoint, or '
                              'target: composer.callbacks:LoadCheckpoint) with its load_path, so that the file is '
                              'checked')
        callbacks.append(callback)
    return callbacks


def build_model(spec: RunSpec) -> ComposerModel:
    """The model the recipe names, as a ``ComposerModel`` (a plain module is wrapped: :func:`as_composer_model`)."""
    from composer_sampling.recipes.models import as_composer_model

    part = spec.parts['model']
    return as_composer_model(built(part), part.label)


def build_optimizer(spec: RunSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer builder gets ``params`` (the model's parameters) and its own arguments."""
    return built(spec.parts['optimizer'], lambda made: isinstance(made, torch.optim.Optimizer),
                 'a torch.optim.Optimizer', {'params': model.parameters()})



def build_trainer(run: Run, **overrides: Any) -> Trainer:
    """The run's ``Trainer``; ``overrides`` go straight to ``Trainer`` (tests add callbacks).

    ``autoresume`` is not passed: :func:`build_run` gave its checkpoint to ``load_path``
    (:mod:`~composer_sampling.recipes.autoresume`), so that it is checked before Composer loads it.
    """
    from composer import Trainer

    recipe = run.recipe
    torch.manual_seed(recipe.seed)  # the model's initial weights follow the recipe's seed
    model = build_model(run.spec)
    checked = run.checked.checkpoints.get('load_path') if run.checked is not None else None
    if checked is not None:
        check_model_shapes(checked, model, run.spec.parts['model'].label)
    extra_callbacks = list(overrides.pop('callbacks', []))
    parts = run.composer_parts if run.composer_parts is not None else build_composer_parts(run.spec)
    arguments: dict[str, Any] = {
        'model': model,
        'train_dataloader': run.train_loader,
        'eval_dataloader': run.eval_loader,
        'eval_interval': recipe.eval_interval,
        'max_duration': recipe.max_duration,
        'optimizers': build_optimizer(run.spec, model),
        'schedulers': parts.schedulers,
        'scale_schedule_ratio': recipe.scale_schedule_ratio,
        'loggers': parts.loggers,
        'algorithms': parts.algorithms,
        **console_arguments(recipe),  # progress_bar, log_to_console, console_log_interval
        'device': run.device,
        'precision': recipe.precision,
        'parallelism_config': recipe.parallelism_config,
        'device_train_microbatch_size': run.batch_sizes.microbatch,
        'seed': recipe.seed,
        'callbacks': [*run.callbacks, *extra_callbacks],
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


def check_model_shapes(checked: CheckedCheckpoint, model: torch.nn.Module, label: str) -> None:
    """The checkpoint at ``load_path`` holds the model's tensors, each of the model's shape.

    Composer would stop inside ``Trainer`` with torch's ``size mismatch`` (or
    ``Missing key(s)``) traceback; this names the parameter and both shapes first.
    Only ``load_path``'s: a callback's load takes options (``ignore_keys``,
    ``strict_model_weights``) that change what must match.
    """
    if not checked.model_shapes:
        return  # trusted unchecked, or a checkpoint without a model
    own = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    for name, shape in checked.model_shapes.items():
        if name in own and own[name] != shape:
            raise RecipeError(f'{checked.field}: the checkpoint {checked.path} holds {name} of shape {list(shape)}, '
                              f'the model ({label}) has {name} of shape {list(own[name])}: it was written by a model '
                              'of another shape; load one of this model, or set the model options it was trained with')
    extra, missing = sorted(set(checked.model_shapes) - set(own)), sorted(set(own) - set(checked.model_shapes))
    if extra or missing:
        detail = f'holds {extra[0]}, which the model lacks' if extra else f'lacks the model\'s {missing[0]}'
        raise RecipeError(f'{checked.field}: the checkpoint {checked.path} {detail} (model: {label}): it was written '
                          'by another model; load one of this model, or build the model it was trained with')


def build_run(spec: RunSpec, world_size: int | None = None, rank: int | None = None, device: str | None = None) -> Run:
    """Check and build everything for this process but the Trainer; raises :class:`RecipeError` before training.

    ``world_size`` and ``rank`` default to this process's (``composer.utils.dist``); ``device`` to the one this
    machine trains the recipe on (:func:`~composer_sampling.recipes.run_fields.machine_device`, which the runner
    has computed already).
    """
    from composer.utils import dist

    from composer_sampling._graph.walk import active_root, sharding_problem
    from composer_sampling.recipes.autoresume import autoresumed
    from composer_sampling.recipes.build_data import Placement, build_data, build_eval_loader, build_train_loader
    from composer_sampling.recipes.checks import check_folders, checked_spec

    world_size = dist.get_world_size() if world_size is None else world_size
    rank = dist.get_global_rank() if rank is None else rank
    recipe = spec.recipe
    if device is None:
        device = machine_device(recipe.device, recipe.precision, recipe.parallelism_config)
    spec = replace(spec, recipe=autoresumed(recipe))  # the latest checkpoint, checked as load_path is
    checked = checked_spec(spec, world_size)
    check_folders(spec)
    batch_sizes = checked.batch_sizes
    data = build_data(spec, batch_sizes)
    callbacks = build_callbacks(spec, checked.checkpoints)
    composer_parts = build_composer_parts(spec)
    seed = checked.checkpoint_seed if checked.checkpoint_seed is not None else spec.sync.data_seed
    where = Placement(batch_sizes.data_parallel, rank // batch_sizes.replication, seed)
    train_loader = build_train_loader(spec, data.train, batch_sizes, where)
    problem = sharding_problem(active_root(train_loader), world_size, rank, batch_sizes.replication)
    if problem is not None:
        raise RecipeError(f'train_loader.sampler ({spec.sampler.label}): {problem}')
    return Run(spec, batch_sizes, data.train, data.held_out, train_loader, build_eval_loader(spec, data.held_out),
               callbacks, checked, composer_parts, device)


def run_rows(run: Run) -> list[tuple[str, Any]]:
    """The summary's rows about the training around the data: device, precision, parallelism, autoresume, and the
    LR schedule, algorithms and loggers when the recipe sets them."""
    recipe = run.recipe
    device = run.device if recipe.device == run.device else f'{run.device} (device: {recipe.device})'
    default = 'amp_fp16' if run.device == 'gpu' else 'fp32'
    rows: list[tuple[str, Any]] = [
        ('device', device),
        ('precision', recipe.precision or f"{default} (Composer's default on {run.device})"),
    ]
    if recipe.parallelism_config:
        rows.append(('parallelism', ', '.join(recipe.parallelism_config)))
    if recipe.autoresume:
        checked = run.checked.checkpoints.get('load_path') if run.checked is not None else None
        resumed = checked.path if checked is not None else recipe.load_path
        if resumed is not None and os.path.islink(resumed):
            resumed = f'{resumed} ({os.readlink(resumed)})'
        rows.append(('autoresume', f'resumes from {resumed}' if resumed is not None else
                     'no checkpoint in save_folder yet: starts fresh'))
    return rows + summary_rows(run.spec)
