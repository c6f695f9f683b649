"""Every refusal of a resolved recipe that needs no training: ``plan`` and ``train`` run the same ones.

:func:`checked_spec` runs what needs neither data nor Composer: the batch math and
the seed for this world size, each builder's import and arguments (``plan`` imports
only the data parts), the checkpoint at ``load_path``. ``train`` adds
:func:`check_folders`. Once the datasets are built (never indexed), :func:`check_data`
checks the splits, the mixture's sources and token units. Every failure is a
:class:`~composer_sampling.recipes.errors.RecipeError` naming the field.

Example:
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> checked_spec(resolve(load_recipe(None, ['seed=4294967295'])), world_size=2)
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.errors.RecipeError: seed=4294967295 is too large for 2 ranks: ...
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from composer_sampling.batching import BatchSizeError, BatchSizes, batch_sizes
from composer_sampling.recipes.builders import RUNNER_KEYWORDS, builder_of
from composer_sampling.recipes.checkpoints import CheckedCheckpoint, check_checkpoint_field, checkpoint_fields
from composer_sampling.recipes.composer_names import SAME_UNIT_WARMUP
from composer_sampling.recipes.durations import parse_duration
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import check_save_folders
from composer_sampling.recipes.registry import RegistryError, check_arguments
from composer_sampling.recipes.resolve import DATA_FIELDS, PartSpec, RunSpec

__all__ = ['Checked', 'check_data', 'check_folders', 'checked_spec', 'counts_tokens', 'recipe_batch_sizes']


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


def checked_spec(spec: RunSpec, world_size: int, training: bool = True) -> Checked:
    """Batch math, seed, builders (the data parts only when not ``training``) and the checkpoints.

    When ``training``, each checkpoint is copied into a private folder and the copy
    checked and handed to Composer (:class:`CheckedCheckpoint`); ``plan`` checks the
    files where they are.
    """
    batch_sizes = recipe_batch_sizes(spec, world_size)
    limit = 2**32 - world_size
    if spec.recipe.seed > limit:
        raise RecipeError(f'seed={spec.recipe.seed} is too large for {world_size} ranks: Composer seeds rank r with '
                          f'seed + r, which must stay below 2**32; use a seed in [0, {limit}]')
    _check_warmup_units(spec)
    imported = {part.field: _check_builder(part)
                for part in (*spec.parts.values(), *spec.callbacks, *spec.schedulers, *spec.loggers, *spec.algorithms)
                if training or part.field in DATA_FIELDS}
    builders = {part.field: imported[part.field] for part in spec.callbacks if part.entry is None} if training else {}
    _check_one_ledger(spec, builders)
    fields = checkpoint_fields(spec, builders)
    copies = None
    if training and fields and int(os.environ.get('LOCAL_RANK', '0')) == 0:  # the process whose file Composer reads
        copies = tempfile.TemporaryDirectory(prefix='composer-sampling-checkpoints-')
    checked = {name: check_checkpoint_field(spec, name, value, training, copies) for name, value in fields.items()}
    return Checked(batch_sizes, checked, copies)


def _check_warmup_units(spec: RunSpec) -> None:
    """A warmup schedule's ``t_warmup`` and ``t_max`` in one unit as Composer counts them, else Composer stops the
    ``Trainer`` it is building (after the summary) with a ``ValueError``."""
    max_unit = spec.durations['max_duration'][1]

    def counted(text: str) -> str:  # Composer's _convert_time: dur in max_duration's unit, then ep as batches
        unit = parse_duration(str(text))[1]
        unit = max_unit if unit == 'dur' else unit
        return 'ba' if unit == 'ep' else unit

    for part in spec.schedulers:
        if part.target.rpartition(':')[2] not in SAME_UNIT_WARMUP or part.arguments.get('t_warmup') is None:
            continue
        warmup, t_max = part.arguments['t_warmup'], part.arguments.get('t_max', '1dur')
        if counted(warmup) != counted(t_max):
            raise RecipeError(f'{part.field}: t_warmup={warmup!r} counts {counted(warmup)} and t_max={t_max!r} counts '
                              f'{counted(t_max)} (with max_duration={spec.recipe.max_duration!r}; Composer counts ep '
                              f'as batches and dur in max_duration\'s unit); {part.label} needs both in one unit: '
                              'write them in the same unit')


def _check_one_ledger(spec: RunSpec, builders: Mapping[str, Any]) -> None:
    """One callback writes a ledger: SampleLedger's own refusal of a second, before any run.

    Its folder may be a URI (a remote save folder's ``ledger/``): SampleLedger stages the
    files locally and uploads them.

    Registered parts are known by name; a ``target`` part by its imported builder (``builders``, by field:
    ``train`` only imports them).
    """
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


#: How a builder's message names a part of a field of several: ``the callback LRMonitor``, ``the scheduler ...``.
_MAPPED_KINDS = {'callbacks': 'callback', 'loggers': 'logger', 'algorithms': 'algorithm', 'schedulers': 'scheduler'}


def _check_builder(part: PartSpec) -> Callable[..., Any]:
    """Import a part's builder and check its arguments (and the runner's keywords) against its signature."""
    builder = builder_of(part)
    runner = {name: None for name in RUNNER_KEYWORDS.get(part.field, ())}
    positional = 1 if part.field.endswith('collate_fn') else 0  # called with the list of samples
    head = part.field.split('.')[0].split('[')[0]
    kind = _MAPPED_KINDS.get(head) or part.field.rsplit('.', 1)[-1].replace('_', ' ')
    arguments = dict(part.arguments)
    if part.entry is not None and part.entry.ledger_folder and arguments.get('folder') is None:
        arguments['folder'] = None
    try:
        check_arguments(builder, {**arguments, **runner}, f'the {kind}', positional)
    except RegistryError as error:
        raise RecipeError(f'{part.field}: {error}') from None
    return builder


def check_folders(spec: RunSpec) -> None:
    """The save and ledger folders: :func:`~composer_sampling.recipes.folders.check_save_folders` of the recipe."""
    check_save_folders(spec.recipe, spec.ledger_folder)


def check_data(spec: RunSpec, batch_sizes: BatchSizes, train: Any, held_out: Any, sources: list[Any] | None) -> None:
    """The splits hold samples, the train split a global batch, every source a step; ``tok`` only where counted."""
    _check_splits(spec, batch_sizes, train, held_out)
    _check_token_units(spec, train)
    if sources is not None:
        _check_sources(spec, batch_sizes, sources)


def _check_splits(spec: RunSpec, batch_sizes: BatchSizes, train: Any, held_out: Any) -> None:
    label = spec.parts['train_loader.dataset'].label
    train_len, held_out_len = len(train), len(held_out)
    own = spec.parts.get('eval_loader.dataset')
    if held_out_len == 0 and own is not None:
        raise RecipeError(f'eval_loader.dataset ({own.label}) is empty; give it samples to evaluate on')
    if held_out_len == 0 or train_len == 0:
        empty = 'held-out' if held_out_len == 0 else 'train'
        raise RecipeError(f'{spec.held_out_field}={spec.held_out_fraction} leaves the {empty} split of the {label} '
                          f'dataset ({train_len + held_out_len} samples) empty; use a fraction that leaves samples '
                          'in both')
    if train_len < batch_sizes.data_parallel:
        raise RecipeError(f'the train split of {train_len} samples (train_loader.dataset: {label}) is smaller '
                          f'than the {batch_sizes.data_parallel} data-parallel ranks: some rank would train nothing; '
                          'use a larger dataset or fewer ranks')
    if batch_sizes.global_batch > train_len:
        ranks = batch_sizes.data_parallel
        largest = train_len // ranks * ranks
        multiple = f' (a multiple of the {ranks} data-parallel ranks)' if ranks > 1 else ''
        raise RecipeError(f'global_train_batch_size={batch_sizes.global_batch} is larger than the train split of '
                          f'{train_len} samples (train_loader.dataset: {label}); use at most {largest}{multiple}')


def counts_tokens(dataset: Any) -> bool:
    """Whether Composer counts tokens in batches of ``dataset``: samples with ``input_ids``, or a ``max_seq_len``.

    Example:
        >>> counts_tokens([{'input_ids': [1, 2]}]), counts_tokens([{'input': 0.5}])
        (True, False)
    """
    if hasattr(dataset, 'max_seq_len'):
        return True
    if len(dataset) == 0:
        return False
    sample = dataset[0]
    return isinstance(sample, Mapping) and 'input_ids' in sample


def _check_token_units(spec: RunSpec, train: Any) -> None:
    in_tokens = [name for name, (_, unit) in spec.durations.items() if unit == 'tok']
    if in_tokens and not counts_tokens(train):
        name = in_tokens[0]
        effect = 'train forever' if name == 'max_duration' else 'never reach it'
        raise RecipeError(f'{name}={getattr(spec.recipe, name)!r} counts tokens, but Composer counts none in this run '
                          f'(the {spec.parts["train_loader.dataset"].label} dataset yields no input_ids and has no '
                          f'max_seq_len), so the run would {effect}; use ep, ba or sp')


def _check_sources(spec: RunSpec, batch_sizes: BatchSizes, sources: list[Any]) -> None:
    """Every mixture source holds at least one global step, or it would never be trained."""
    fractions = spec.source_fractions
    sizes = [len(source) for source in sources]
    total, step = sum(sizes), batch_sizes.global_batch
    short = [k for k, size in enumerate(sizes) if size < step]
    if not short:
        return
    k = short[0]
    ranks = batch_sizes.data_parallel
    largest = min(sizes) // ranks * ranks
    smallest_fraction = -(-step * 1000 // total) / 1000
    batch = f', or a global_train_batch_size of at most {largest}' if largest >= ranks else ''
    if fractions is None:
        raise RecipeError(f'train_loader.dataset: source {k} holds {sizes[k]} of the {total} train samples, fewer '
                          f'than one global step of {step}, so it would never be trained; give it at least {step} '
                          f'samples{batch}')
    raise RecipeError(
        f'train_loader.sampler.source_fractions={list(fractions)}: source {k} (fraction {fractions[k]}) holds '
        f'{sizes[k]} of the {total} train samples, fewer than one global step of {step}, so it would never be '
        f'trained; give every source a fraction of at least {smallest_fraction} ({step} / {total}){batch}',
    )
