"""Every checkpoint a recipe names, checked before Composer unpickles it: ``load_path`` and the callbacks' paths.

Each is resolved as Composer resolves it and loaded weights-only unless trusted; ``train`` hands Composer a
checked private copy. Every failure is a :class:`~composer_sampling.recipes.errors.RecipeError`.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> check_checkpoint_field(resolve(load_recipe(None, ["load_path=''"])), 'load_path', '')
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.errors.RecipeError: load_path is empty (''): give the checkpoint file to load, ...
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import torch

from composer_sampling._checkpoint.envelope import payload_of
from composer_sampling._checkpoint.import_names import OutsideAllowedError
from composer_sampling._checkpoint.safe_load import (
    CheckpointError,
    checked_copy,
    composer_load_path,
    composer_sharded_path,
    download_scheme,
    downloaded_checked_copy,
    load_checked_checkpoint,
    resolve_safe_global,
    sharded_handoff,
)
from composer_sampling._checkpoint.sharded import is_sharded_checkpoint, load_checked_sharded
from composer_sampling._validate import is_integer
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.registry import (
    ALLOWED_MODULES_VARIABLE,
    CALLBACKS,
    NotAllowedError,
    allowed_modules,
    check_allowed,
    walk_refused,
)
from composer_sampling.recipes.resolve import RunSpec
from composer_sampling.recipes.run_fields import loads_sharded

__all__ = ['CheckedCheckpoint', 'check_checkpoint_field', 'checkpoint_argument_of', 'checkpoint_fields']

#: The recipe field that makes Composer save and load sharded checkpoints.
SHARDED_CONFIG = 'parallelism_config: {fsdp: {state_dict_type: sharded}}'


@dataclass(frozen=True)
class CheckedCheckpoint:
    """A checked checkpoint: ``load_path`` is what Composer receives (the checked copy, or the recipe's value)."""

    field: str  # 'load_path' or 'callbacks.NAME.load_path'
    path: str  # the file Composer reads, as Composer resolves the recipe's value
    load_path: str
    model_shapes: Mapping[str, tuple[int, ...]] = dataclass_field(default_factory=dict)  # empty when trusted unchecked
    sync_state: Any = None  # SamplerSync's state in the file (its envelope), when it holds one
    trained: Mapping[str, int] = dataclass_field(default_factory=dict)  # its Timestamp: epoch, batch, sample, token...

    @property
    def data_seed(self) -> int | None:
        seed = (payload_of(self.sync_state) or {}).get('data_seed')
        return int(seed) if is_integer(seed) else None


def checkpoint_fields(spec: RunSpec, builders: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Every checkpoint path the recipe names, by field: ``load_path`` and each callback's that Composer unpickles,
    a callback given by ``target`` matched by its class in ``builders`` (by field).

    Example:
        >>> from composer_sampling.recipes.resolve import resolve
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> spec = resolve(load_recipe(None, ['load_path=a.pt', 'callbacks.load_checkpoint.load_path=b.pt']))
        >>> checkpoint_fields(spec)
        {'load_path': 'a.pt', 'callbacks.load_checkpoint.load_path': 'b.pt'}
    """
    fields = {} if spec.recipe.load_path is None else {'load_path': spec.recipe.load_path}
    for part in spec.callbacks:
        argument = part.entry.checkpoint_argument if part.entry is not None else \
            checkpoint_argument_of((builders or {}).get(part.field))
        if argument is not None and argument in part.arguments:
            value = part.arguments[argument]
            if not isinstance(value, str):
                raise RecipeError(f'{part.field}.{argument} must be a path (a string), got {value!r}')
            fields[f'{part.field}.{argument}'] = value
    return fields


def checkpoint_argument_of(builder: Any) -> str | None:
    """The checkpoint argument of ``builder`` if it is (a subclass of) a registered callback that unpickles one.

    Example:
        >>> checkpoint_argument_of(dict) is None
        True
    """
    if not isinstance(builder, type):
        return None
    for name in CALLBACKS.names():
        entry = CALLBACKS.entry(name, declared=False)
        registered = CALLBACKS.get(name) if entry.checkpoint_argument is not None else None
        if isinstance(registered, type) and issubclass(builder, registered):
            return entry.checkpoint_argument
    return None


def check_checkpoint_field(spec: RunSpec, field_name: str, value: str,
                           copies: tempfile.TemporaryDirectory[str] | None = None) -> CheckedCheckpoint:
    """The checkpoint at ``value``, resolved as Composer resolves it, loads without running code unless trusted.

    With ``copies``, a single file is checked as a private copy in it, which Composer receives. A sharded run reads
    a folder, checked in place on every rank; Composer receives the folder that links led to.
    """
    recipe = spec.recipe
    if not value.strip():
        raise RecipeError(f'{field_name} is empty ({value!r}): give the checkpoint file to load, or leave '
                          f'{field_name} out to start from scratch')
    field_name = spec.load_path_field if field_name == 'load_path' else field_name  # autoresume's, named so
    sharded, scheme = loads_sharded(recipe.parallelism_config), download_scheme(value)
    if sharded and scheme is not None and not recipe.trust_checkpoint:
        raise RecipeError(f'{field_name}: {value} is a URI ({scheme}://); Composer downloads a sharded checkpoint '
                          'file by file as it loads it, and only a local folder can be checked: download the folder '
                          'and give its local path, or set trust_checkpoint: true to load it unchecked if you trust it')
    try:
        path = value if sharded and scheme is not None else \
            (composer_sharded_path if sharded else composer_load_path)(value, spec.run_name)
    except CheckpointError as error:
        if not (recipe.trust_checkpoint and error.reason == 'unchecked'):
            raise RecipeError(f'{field_name}: {error}{_hint(error)}') from None
        path = value
    where, local = field_name if path == value else f'{field_name} {value!r}', download_scheme(path) is None
    if not sharded and local and is_sharded_checkpoint(path):
        raise RecipeError(f'{where}: {path} is a sharded checkpoint (a torch.distributed.checkpoint folder), which '
                          f'Composer loads only in a run with sharded checkpoints; set {SHARDED_CONFIG} (under '
                          'FSDP_VERSION=2 on the CPU), or load a single-file checkpoint')
    if recipe.trust_checkpoint:
        if allowed_modules() is not None:
            raise RecipeError(f'trust_checkpoint: true loads {where} unchecked, and unpickling it may import any '
                              f'module, which {ALLOWED_MODULES_VARIABLE} forbids; list the types it needs in '
                              'checkpoint_safe_globals instead')
        if local and not os.path.exists(path) and not os.path.exists(path + '.symlink'):
            raise RecipeError(f'{where}: {path} does not exist')
        return CheckedCheckpoint(field_name, path, value)
    if sharded:
        _check_sharded_folder(where, path)
    extra = _safe_globals(recipe.checkpoint_safe_globals)
    try:
        if sharded:
            shown, path = path, os.path.realpath(path)
            loaded, handed = load_checked_sharded(path, extra, shown_as=shown), sharded_handoff(path)
        elif copies is not None:  # the checked copy is what Composer loads; a remote one downloaded as Composer does
            folder = tempfile.mkdtemp(dir=copies.name)
            if local:
                handed, loaded = checked_copy(path, folder, extra)
            else:
                handed, loaded, path = downloaded_checked_copy(value, spec.run_name, folder, extra)
        elif local:
            handed, loaded = value, load_checked_checkpoint(path, extra)
        else:
            with tempfile.TemporaryDirectory(prefix='composer-sampling-check-') as folder:
                _, loaded, path = downloaded_checked_copy(value, spec.run_name, folder, extra)
            handed = value
    except CheckpointError as error:
        raise RecipeError(f'{where}: {error}{_hint(error)}') from None
    state = loaded['state']
    model, callbacks = state.get('model'), state.get('callbacks') or {}
    shapes = {name: tuple(tensor.shape) for name, tensor in model.items() if isinstance(tensor, torch.Tensor)} \
        if isinstance(model, dict) else {}
    _check_callback_states(where, path, callbacks)
    saved = state['timestamp'].get('Timestamp') if isinstance(state.get('timestamp'), Mapping) else None
    trained = {key: int(time) for key, time in saved.items() if is_integer(time)} if isinstance(saved, Mapping) else {}
    return CheckedCheckpoint(field_name, path, handed, shapes, callbacks.get('SamplerSync'), trained)


def _check_sharded_folder(where: str, path: str) -> None:
    """A sharded run's checkpoint is a folder that exists, since Composer reads one."""
    if not os.path.exists(path):
        fields = [name for name in ('{rank}', '{local_rank}', '{node_rank}') if name in path]
        note = f' (Composer does not fill {", ".join(fields)} in a sharded checkpoint\'s path: every rank reads ' \
               'one folder)' if fields else ''
        raise RecipeError(f'{where}: {path} does not exist{note}; give the checkpoint folder (ep{{epoch}}-ba{{batch}}) '
                          'or the save folder\'s latest-rank0.pt link to it')
    if not os.path.isdir(path):
        raise RecipeError(f'{where}: {path} is a single file, but this run loads sharded checkpoints '
                          f'({SHARDED_CONFIG}), which Composer reads from a folder; give the checkpoint folder '
                          '(ep{epoch}-ba{batch}) or the save folder\'s latest-rank0.pt link to it, or set '
                          'parallelism_config.fsdp.state_dict_type: full to load a single file')


def _hint(error: CheckpointError) -> str:
    return {
        'unsafe': "; if you trust this file, add what it needs to checkpoint_safe_globals ('module:Name') or set "
                  'trust_checkpoint: true',
        'unchecked': '; set trust_checkpoint: true to load it unchecked if you trust it',
    }.get(error.reason, '')


def _safe_globals(names: list[str]) -> list[Any]:
    """The allow-list entries of ``checkpoint_safe_globals``, each under the allow-list of modules."""
    extra = []
    allowed = allowed_modules()
    for k, name in enumerate(names):
        where = f'checkpoint_safe_globals[{k}]'
        try:
            check_allowed(name.partition(':')[0], where)
            extra.extend(resolve_safe_global(name, allowed))
        except NotAllowedError as error:
            raise RecipeError(str(error)) from None
        except OutsideAllowedError as error:
            raise RecipeError(str(walk_refused(where, name, error))) from None
        except CheckpointError as error:
            raise RecipeError(f'{where}: {error}') from None
    return extra


def _check_callback_states(where: str, path: str, callbacks: Mapping[str, Any]) -> None:
    """Each callback state in the file is one a throwaway callback loads, else blamed on the file."""
    from composer_sampling.callbacks.sample_ledger import SampleLedger
    from composer_sampling.callbacks.sampler_sync import SamplerSync

    for callback in (SamplerSync, SampleLedger):
        name = callback.__name__
        saved = callbacks.get(name)
        if saved is None:
            continue
        try:
            callback().load_state_dict(dict(saved) if isinstance(saved, dict) else saved)
        except (TypeError, ValueError) as error:
            raise RecipeError(f'{where}: the checkpoint {path} holds a {name} state that cannot be loaded ({error}); '
                              f'the file is damaged or was not written by {name}: load another checkpoint') from None
