"""The refusals of a resolved recipe that need neither data nor training, run alike by ``plan`` and ``train``.

Every failure is a :class:`~composer_sampling.recipes.errors.RecipeError` naming the field.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> checked_spec(resolve(load_recipe(None, ['seed=4294967295'])), world_size=2)
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.errors.RecipeError: seed=4294967295 is too large for 2 ranks: ...
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from composer_sampling._checkpoint.safe_load import composer_reading
from composer_sampling.batching import BatchSizeError, BatchSizes, batch_sizes
from composer_sampling.recipes.builders import RUNNER_KEYWORDS, builder_of
from composer_sampling.recipes.checkpoints import CheckedCheckpoint, check_checkpoint_field, checkpoint_fields
from composer_sampling.recipes.composer_names import ALGORITHM_CHOICES, SAME_UNIT_WARMUP
from composer_sampling.recipes.durations import parse_duration
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.registry import RegistryError, check_arguments
from composer_sampling.recipes.resolve import PartSpec, RunSpec

__all__ = ['Checked', 'checked_spec', 'recipe_batch_sizes']


@dataclass(frozen=True)
class Checked:
    """What the checks found: the batch math and every checkpoint the recipe names, checked."""

    batch_sizes: BatchSizes
    checkpoints: Mapping[str, CheckedCheckpoint] = dataclass_field(default_factory=dict)  # by field
    copies: tempfile.TemporaryDirectory[str] | None = None  # the private copies Composer loads, while they are needed

    @property
    def checkpoint_seed(self) -> int | None:
        """The data seed of the checkpoint at ``load_path``, when it holds one."""
        checked = self.checkpoints.get('load_path')
        return checked.data_seed if checked is not None else None


def checked_spec(spec: RunSpec, world_size: int, copy_checkpoints: bool = True) -> Checked:
    """Batch math, seed, every builder (imported and its arguments checked, not called) and the checkpoints.

    With ``copy_checkpoints`` (``train``), Composer receives a checked private copy of each checkpoint.
    """
    batch_sizes = recipe_batch_sizes(spec, world_size)
    limit = 2**32 - world_size
    if spec.recipe.seed > limit:
        raise RecipeError(f'seed={spec.recipe.seed} is too large for {world_size} ranks: Composer seeds rank r with '
                          f'seed + r, which must stay below 2**32; use a seed in [0, {limit}]')
    _check_warmup_units(spec)
    _check_scaled_duration(spec)
    _check_algorithm_choices(spec)
    imported = {part.field: _check_builder(part)
                for part in (*spec.parts.values(), *spec.callbacks, *spec.schedulers, *spec.loggers, *spec.algorithms)}
    builders = {part.field: imported[part.field] for part in spec.callbacks if part.entry is None}
    _check_one_ledger(spec, builders)
    fields = checkpoint_fields(spec, builders)
    # Composer reads a single-file checkpoint on each node's local rank 0, so only that process makes the copies.
    copies = _copies_folder() if copy_checkpoints and fields and int(os.environ.get('LOCAL_RANK', '0')) == 0 else None
    checked = {name: check_checkpoint_field(spec, name, value, copies) for name, value in fields.items()}
    return Checked(batch_sizes, checked, copies)


def _copies_folder() -> tempfile.TemporaryDirectory[str]:
    """A new private folder in ``TMPDIR`` for the checked copies, refused if Composer would misread a path in it."""
    copies = tempfile.TemporaryDirectory(prefix='composer-sampling-checkpoints-')
    probe = os.path.join(copies.name, 'checkpoint.pt')
    read = composer_reading(probe)
    if read != probe:
        copies.cleanup()
        raise RecipeError(f'the checked copy of each checkpoint goes into the temporary folder '
                          f'{tempfile.gettempdir()} (TMPDIR), where Composer cannot read it: given {probe}, Composer '
                          f"would read {read}; set TMPDIR to a folder without '#', '?', ';' or a 'scheme:' prefix")
    return copies


def _check_warmup_units(spec: RunSpec) -> None:
    """A warmup schedule's ``t_warmup`` and ``t_max`` count one unit, or Composer's ``Trainer`` raises late."""
    max_unit = spec.durations['max_duration'][1]

    def counted(part: PartSpec, name: str, text: str) -> str:  # Composer's _convert_time: dur in max_duration's
        try:                                                      # unit, then ep as batches
            unit = parse_duration(str(text))[1]
        except ValueError as error:
            raise RecipeError(f'{part.arguments_field}.{name}: {error}') from None
        unit = max_unit if unit == 'dur' else unit
        return 'ba' if unit == 'ep' else unit

    for part in spec.schedulers:
        if part.target.rpartition(':')[2] not in SAME_UNIT_WARMUP or part.arguments.get('t_warmup') is None:
            continue
        warmup, t_max = part.arguments['t_warmup'], part.arguments.get('t_max', '1dur')
        warmup_unit, t_max_unit = counted(part, 't_warmup', warmup), counted(part, 't_max', t_max)
        if warmup_unit != t_max_unit:
            raise RecipeError(f'{part.field}: t_warmup={warmup!r} counts {warmup_unit} and t_max={t_max!r} counts '
                              f'{t_max_unit} (with max_duration={spec.recipe.max_duration!r}; Composer counts ep '
                              f'as batches and dur in max_duration\'s unit); {part.label} needs both in one unit: '
                              'write them in the same unit')


def _check_scaled_duration(spec: RunSpec) -> None:
    """``scale_schedule_ratio`` leaves at least one unit of ``max_duration``, or Composer's ``Trainer`` raises late."""
    ratio, (value, unit) = spec.recipe.scale_schedule_ratio, spec.durations['max_duration']
    if ratio == 1 or unit == 'dur' or int(value * ratio) > 0:
        return
    smallest = math.ceil(1000 / value) / 1000
    raise RecipeError(f'scale_schedule_ratio={ratio:g} scales max_duration={spec.recipe.max_duration!r} to '
                      f'{int(value * ratio)}{unit} (Composer keeps the whole units of {value} x {ratio:g}), which '
                      f'trains nothing; use a scale_schedule_ratio of at least {smallest:g}, or a longer max_duration')


def _check_algorithm_choices(spec: RunSpec) -> None:
    """The arguments in ``ALGORITHM_CHOICES``, which Composer checks only when the algorithm first runs."""
    for part in spec.algorithms:
        choices = ALGORITHM_CHOICES.get(part.target.rpartition(':')[2], {})
        for name, allowed in choices.items():
            value = part.arguments.get(name)
            if value is not None and value not in allowed:
                raise RecipeError(f'{part.arguments_field}.{name} must be one of {", ".join(allowed)}, got {value!r} '
                                  '(Composer checks it only at the first batch)')


def _check_one_ledger(spec: RunSpec, builders: Mapping[str, Any]) -> None:
    """One callback writes a ledger: SampleLedger's own refusal of a second, before any run."""
    parts = [part for part in spec.callbacks if part.entry is not None and part.entry.ledger_folder]
    if builders:
        from composer_sampling.callbacks.sample_ledger import SampleLedger

        parts += [part for part in spec.callbacks if isinstance(built := builders.get(part.field), type)
                  and issubclass(built, SampleLedger)]
    if len(parts) > 1:
        raise RecipeError(f'{" and ".join(part.field for part in parts)} each record a ledger; a run records one '
                          '(SampleLedger refuses a second on one Trainer): keep one')


#: The recipe field of each quantity of the batch math.
BATCH_FIELDS = {'global_batch': 'global_train_batch_size', 'world_size': 'world size',
                'microbatch': 'device_train_microbatch_size', 'accumulation_steps': 'gradient_accumulation_steps',
                'replication': 'callbacks.sampler_sync.replication'}


def recipe_batch_sizes(spec: RunSpec, world_size: int) -> BatchSizes:
    """The recipe's batch math for ``world_size`` processes, as a :class:`RecipeError` if it does not divide."""
    recipe = spec.recipe
    try:
        return batch_sizes(recipe.global_train_batch_size, world_size, microbatch=recipe.device_train_microbatch_size,
                            accumulation_steps=recipe.gradient_accumulation_steps, replication=spec.sync.replication)
    except BatchSizeError as error:
        raise RecipeError(error.render(BATCH_FIELDS)) from None


def _check_builder(part: PartSpec) -> Callable[..., Any]:
    """Import a part's builder and check its arguments (and the runner's keywords) against its signature."""
    builder = builder_of(part)
    positional = 1 if part.field.endswith('collate_fn') else 0  # called with the list of samples
    head = part.field.split('.')[0].split('[')[0]  # a part of a mapping is named "the callback", "the logger"...
    several = head in ('callbacks', 'loggers', 'algorithms', 'schedulers')
    kind = head[:-1] if several else part.field.rsplit('.', 1)[-1].replace('_', ' ')
    ledger = {'folder': None} if part.entry is not None and part.entry.ledger_folder else {}  # the runner fills it
    runner = dict.fromkeys(RUNNER_KEYWORDS.get(part.field, ()))
    try:
        check_arguments(builder, {**ledger, **part.arguments, **runner}, f'the {kind}', positional)
    except RegistryError as error:
        raise RecipeError(f'{part.field}: {error}') from None
    return builder

