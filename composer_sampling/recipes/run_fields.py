"""The hardware a recipe trains on: ``device``, ``precision``, ``parallelism_config``, and ``autoresume``'s needs.

:func:`check_run_fields` runs without importing torch; :func:`machine_device` makes the refusals only the machine
can decide, for ``train`` alone.

Example:
    >>> from types import SimpleNamespace
    >>> check_run_fields(SimpleNamespace(device='cpu', precision='amp_bf16', parallelism_config=None,
    ...                                  autoresume=False, save_folder=None, run_name=None))
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.errors.RecipeError: precision=amp_bf16 cannot train on device=cpu: Composer trains ...
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from composer_sampling.recipes.errors import RecipeError

__all__ = ['DEVICES', 'PARALLELISM_KEYS', 'PRECISIONS', 'check_parallelism_fields', 'check_run_fields',
           'composer_run_name', 'loads_sharded', 'machine_device']

#: The devices a recipe names (``auto``: the GPU when torch sees one, else the CPU, as Composer's ``get_device``).
DEVICES = ('auto', 'cpu', 'gpu', 'mps')
#: Composer's ``Precision`` values.
PRECISIONS = ('fp32', 'amp_fp16', 'amp_bf16', 'amp_fp8')
#: What Composer's ``Trainer`` reads of a ``parallelism_config`` mapping (``_parse_parallelism_config``).
PARALLELISM_KEYS = ('fsdp', 'tp')
_CPU_ONLY_PRECISION = 'fp32'


def _fsdp2_selected() -> bool:
    """Whether Composer builds FSDP2 from a ``parallelism_config.fsdp`` mapping: it does when ``FSDP_VERSION=2``."""
    return os.environ.get('FSDP_VERSION', '1') == '2'


def loads_sharded(parallelism: Mapping[str, Any] | None) -> bool:
    """Whether Composer saves and loads the run's checkpoints sharded (``fsdp.state_dict_type``, FSDP2's default).

    Example:
        >>> loads_sharded({'fsdp': {'state_dict_type': 'sharded'}}), loads_sharded(None)
        (True, False)
    """
    fsdp = (parallelism or {}).get('fsdp')
    default = 'sharded' if _fsdp2_selected() else 'full'
    return isinstance(fsdp, Mapping) and fsdp.get('state_dict_type', default) == 'sharded'


def composer_run_name(recipe: Any) -> str | None:
    """The recipe's run name, else ``COMPOSER_RUN_NAME`` or ``RUN_NAME``; ``None``: Composer will invent one.

    Example:
        >>> from types import SimpleNamespace
        >>> composer_run_name(SimpleNamespace(run_name='digits'))
        'digits'
    """
    return recipe.run_name or os.environ.get('COMPOSER_RUN_NAME') or os.environ.get('RUN_NAME')


def check_run_fields(recipe: Any) -> None:
    """``device``, ``precision``, ``parallelism_config`` and ``autoresume``, as far as no import is needed."""
    if recipe.device not in DEVICES:
        raise RecipeError(f'device must be one of {", ".join(DEVICES)}, got {recipe.device!r}')
    if recipe.precision is not None and recipe.precision not in PRECISIONS:
        raise RecipeError(f'precision must be one of {", ".join(PRECISIONS)} (Composer\'s names), or null for '
                          f'Composer\'s default for the device, got {recipe.precision!r}')
    _check_on_device(recipe.device, recipe.precision, recipe.parallelism_config)
    for key, value in (recipe.parallelism_config or {}).items():
        if key not in PARALLELISM_KEYS:
            raise RecipeError(f'unknown field parallelism_config.{key} (valid: {", ".join(PARALLELISM_KEYS)}, '
                              'as Composer\'s Trainer reads it)')
        if value is not None and not isinstance(value, Mapping):
            raise RecipeError(f'parallelism_config.{key} must be a mapping of Composer\'s '
                              f'{"FSDPConfig" if key == "fsdp" else "TPConfig"} fields, got {value!r}')
    if recipe.autoresume:
        if recipe.save_folder is None:
            raise RecipeError('autoresume: true resumes from the latest checkpoint in save_folder, but save_folder is '
                              'not set; set save_folder (the run\'s checkpoints), or autoresume: false')
        if not composer_run_name(recipe):
            raise RecipeError('autoresume: true needs run_name (Composer refuses to invent one: a restarted run would '
                              'get another name and miss its checkpoints); set run_name, or COMPOSER_RUN_NAME')


def _check_on_device(device: str, precision: str | None, parallelism: Mapping[str, Any] | None,
                     shown: str | None = None) -> None:
    """The pairs Composer refuses on the CPU; ``shown`` names the device as the recipe asked for it."""
    if device != 'cpu':
        return
    shown = shown or 'device=cpu'
    if precision is not None and precision != _CPU_ONLY_PRECISION:
        raise RecipeError(f'precision={precision} cannot train on {shown}: Composer trains on the CPU in fp32 '
                          'only; use precision: fp32 (or null), or a GPU device')
    needs_gpu = [key for key in parallelism or {} if key == 'tp' or not _fsdp2_selected()]
    if needs_gpu:
        fsdp2 = ('; or, for fsdp, set FSDP_VERSION=2: Composer\'s FSDP2 trains on the CPU with gloo'
                 if 'fsdp' in needs_gpu else '')
        raise RecipeError(f'parallelism_config ({", ".join(needs_gpu)}) cannot train on {shown}: Composer\'s '
                          f'FSDP1 and tensor parallelism need GPUs; remove it, or use device: gpu{fsdp2}')


def machine_device(device: str, precision: str | None, parallelism: Mapping[str, Any] | None) -> str:
    """The device this machine trains ``device`` on (``cpu``, ``gpu`` or ``mps``, ``auto`` as Composer's
    ``get_device(None)`` decides), or a refusal naming the fields.

    Example:
        >>> machine_device('cpu', 'fp32', None)
        'cpu'
    """
    import torch

    cuda = torch.cuda.is_available()
    chosen = ('gpu' if cuda else 'cpu') if device == 'auto' else device
    shown = f'device={device}' + (f' (this machine: {chosen}, no CUDA GPU is visible)' if device == 'auto' and
                                  not cuda else '')
    if chosen == 'gpu' and not cuda:
        raise RecipeError('device=gpu, but torch sees no CUDA GPU on this machine (torch.cuda.is_available() is '
                          f'False; torch {torch.__version__}, CUDA build {torch.version.cuda}); use device: auto or '
                          'cpu, or check CUDA_VISIBLE_DEVICES and the driver')
    if chosen == 'mps' and not torch.backends.mps.is_available():
        raise RecipeError('device=mps, but this machine has no Apple MPS device (torch.backends.mps.is_available() is '
                          'False); use device: auto or cpu')
    _check_on_device(chosen, precision, parallelism, shown)
    if precision == 'amp_fp8' and importlib.util.find_spec('transformer_engine') is None:
        raise RecipeError('precision=amp_fp8 needs NVIDIA\'s transformer_engine, which is not installed (Composer '
                          'trains fp8 through it, on GPUs that support fp8); install it, or use amp_bf16')
    if chosen == 'gpu' and precision == 'amp_bf16' and not torch.cuda.is_bf16_supported():
        raise RecipeError(f'precision=amp_bf16 on device={device}: this GPU does not support bfloat16 '
                          '(torch.cuda.is_bf16_supported() is False); use amp_fp16')
    return chosen


def check_parallelism_fields(parallelism: Mapping[str, Any] | None) -> None:
    """Each ``parallelism_config`` section's keys are fields of Composer's config class for it (``FSDPConfig`` and,
    under ``FSDP_VERSION=2``, ``FSDP2Config``, for ``fsdp``).

    Example:
        >>> check_parallelism_fields({'tp': {'degree': 2}})
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.errors.RecipeError: unknown field parallelism_config.tp.degree (Composer's ...
    """
    if not parallelism:
        return
    from composer.utils.parallelism import FSDP2Config, FSDPConfig, TPConfig

    fsdp = (FSDPConfig, FSDP2Config) if _fsdp2_selected() else (FSDPConfig,)
    for key, configs in (('fsdp', fsdp), ('tp', (TPConfig,))):
        section = parallelism.get(key) or {}
        fields = list(dict.fromkeys(item.name for config in configs for item in dataclasses.fields(config)
                                    if not item.name.startswith('_')))
        unknown = sorted(set(section) - set(fields))
        if unknown:
            names = ' and '.join(config.__name__ for config in configs)
            raise RecipeError(f'unknown field parallelism_config.{key}.{unknown[0]} (Composer\'s {names} '
                              f'{"take" if len(configs) > 1 else "takes"}: {", ".join(fields)})')
