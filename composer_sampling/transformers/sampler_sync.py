"""Seeds, epochs and the resume position for every sampler of a Hugging Face train loader: the ``Trainer``'s events
mapped onto :class:`~composer_sampling.DataOrder`."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from composer_sampling._resume.loaded import LoadedOrder
from composer_sampling._resume.place import Place
from composer_sampling._resume.ranks import torch_ranks
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.data_order import DataOrder, TrainerTerms
from composer_sampling.errors import DataOrderError
from composer_sampling.permutation import MAX_DATA_SEED
from composer_sampling.transformers._accelerate import base_loader, replace_base, unshard
from composer_sampling.transformers._loop import batch_in_epoch, batches_of, resume_place, saved_place, steps_per_epoch
from composer_sampling.transformers._state_files import read_state, write_state
from composer_sampling.transformers._wiring import has_resume_hook, is_trainer, wire

__all__ = ['SamplerSync']

#: How transformers names what a refusal speaks of.
_HF_TERMS = TrainerTerms(loop="the Trainer's loop", accumulation='gradient_accumulation_steps')
#: What a refusal of a graph that does not shard by rank adds for a Hugging Face user.
_HF_SHARDING = (' (with Hugging Face: return a sampler that shards by rank from _get_train_sampler, built with '
                'num_replicas=args.world_size and rank=args.process_index, or return the loader from '
                'get_train_dataloader through self.accelerator.prepare, which shards a graph that does not)')


class SamplerSync(TrainerCallback):
    """Keeps the whole sampler graph of a Hugging Face ``Trainer``'s train loader in step with it, and resumes it
    exactly.

    On several processes, accelerate splits the train loader by rank a second time
    when its sampler already shards by rank (every rank trains half of its share),
    ``set_epoch`` reaches only the first levels of the graph, accelerate's seedable
    sampler seeds every epoch with ``seed + epoch``, and a mid-epoch resume skips the
    trained batches in the order of another epoch when the sampler is your own. This
    callback closes those gaps; attach it with :meth:`attach`, which wraps a few
    methods of that one trainer (never of its class):

    * when the trainer has built the train loader: a graph that shards by rank (our
      samplers, :func:`~composer_sampling.distribute`, a rank-aware sampler returned by
      ``_get_train_sampler``) is not split again by accelerate; a graph that does not
      is left to accelerate, whose seedable sampler becomes a torch ``RandomSampler``
      seeded by the data order;
    * at train begin: every sampler is seeded from one data seed (``data_seed``, else
      ``args.data_seed``, else ``args.seed``), checked identical on every rank; every
      node gets ``set_epoch``; the global batch is printed on rank 0, and refused when
      the dataset cannot fill one optimizer step; after a mid-epoch checkpoint the
      graph is placed at the next sample (our samplers start at it, any other graph
      skips the trained indices through a tap), so that ``get_resumed_dataloader``
      returns it and no trained sample is loaded again; a resume into another order, or
      onto other data, is refused;
    * at every later epoch: ``set_epoch`` and the epoch's generators;
    * at every checkpoint: each rank writes its order state (the data seed, the order
      signatures, the layout, the dataset's fingerprint, where the fit stood) into the
      checkpoint folder, as ``data_order_{rank}.pt``.

    The RNG is left to transformers, which saves every rank's state and restores it
    where the run that never stopped had it.

    Args:
        data_seed (int, optional): seed of the data order, in ``[0, 2**64 - 1]``.
            Default: ``None``, ``args.data_seed``, else ``args.seed``.
        check_sharding (bool): refuse graphs that do not shard by rank. Default: ``True``.
        allow_data_change (bool): resume onto changed data with a warning instead of refusing it.
            Default: ``False``.

    Example:
        >>> from transformers import Trainer, TrainingArguments  # doctest: +SKIP
        >>> trainer = SamplerSync().attach(Trainer(model, TrainingArguments('out', seed=17),  # doctest: +SKIP
        ...                                        train_dataset=dataset))
        >>> trainer.train(resume_from_checkpoint=True)  # doctest: +SKIP
    """

    def __init__(self, data_seed: int | None = None, check_sharding: bool = True,
                 allow_data_change: bool = False) -> None:
        self.data_seed = None if data_seed is None else valid_int('data_seed', data_seed, 0, MAX_DATA_SEED)
        self.check_sharding = valid_bool('check_sharding', check_sharding)
        self.allow_data_change = valid_bool('allow_data_change', allow_data_change)
        self._trainer: Any = None
        self._order: DataOrder | None = None  # created with the first train loader
        self._checkpoint: str | None = None  # the folder the fit in progress resumed from
        self._loaded: LoadedOrder | None = None  # its order state, until the order takes it
        self._prepared: Any = None  # the train loader of the fit in progress, as the trainer iterates it
        self._batches = 0  # batches of an epoch, a rank's
        self._accumulate = 1
        self._epoch = 0
        self._resume_at: Place | None = None  # where get_resumed_dataloader must ask for the placed loader

    def __repr__(self) -> str:
        return (f'SamplerSync(data_seed={self.data_seed!r}, check_sharding={self.check_sharding!r}, '
                f'allow_data_change={self.allow_data_change!r})')

    @property
    def seed_in_use(self) -> int | None:
        """The data seed of the current (or last) fit, once its loader is placed."""
        return None if self._order is None else self._order.seed

    @property
    def data_order(self) -> DataOrder | None:
        """The :class:`~composer_sampling.DataOrder` of the train loader, once the trainer has begun to train."""
        return self._order

    def attach(self, trainer: Any) -> Any:
        """Attach to ``trainer`` (a ``transformers.Trainer`` or a subclass): wrap the methods of this instance that
        the data order needs, and add the callback; the trainer.

        Raises:
            TypeError: ``trainer`` is not a ``transformers.Trainer``.
            DataOrderError: this callback is attached to another trainer, or another one to this trainer.
        """
        if not is_trainer(trainer):
            raise TypeError(f'SamplerSync.attach expects a transformers.Trainer (or a subclass), got '
                            f'{type(trainer).__name__}')
        if self._trainer is not None and self._trainer is not trainer:
            raise DataOrderError('SamplerSync is attached to another Trainer already; create one SamplerSync for '
                                 'each Trainer')
        wire(trainer, self)
        if not any(callback is self for callback in trainer.callback_handler.callbacks):
            trainer.add_callback(self)
        self._trainer = trainer
        return trainer

    # the trainer's methods (see _wiring.py) ---------------------------------------------------------------

    def train_starts(self, checkpoint: str | None) -> None:
        """``train()`` is called, resuming from the checkpoint ``checkpoint`` (None: a fresh fit)."""
        self._checkpoint, self._loaded, self._prepared, self._resume_at = checkpoint, None, None, None
        if checkpoint is None:
            return
        state = read_state(checkpoint, torch_ranks().rank)
        if state is not None:
            try:
                self._loaded = LoadedOrder.read(state, reader='Hugging Face SamplerSync')
            except DataOrderError:
                raise
            except (TypeError, ValueError) as error:
                raise DataOrderError(str(error)) from None

    def loader_built(self, prepared: Any) -> Any:
        """The trainer built its train loader: a graph that shards by rank is kept from accelerate's second split."""
        unshard(prepared, torch_ranks().world_size)
        return prepared

    def resumed_loader(self, dataloader: Any, num_batches: int) -> Any:
        """The loader of the resumed epoch after ``num_batches`` batches: the one placed at train begin; None where
        the loader was not placed (an iterable dataset, which transformers skips itself)."""
        at, self._resume_at = self._resume_at, None
        if at is None:
            return None
        if num_batches != at.batches or dataloader is not self._prepared:
            raise DataOrderError(f'SamplerSync placed the train loader at {at}, but the trainer resumes after '
                                 f'{num_batches} batches; the samples would not be the ones it expects')
        return dataloader

    def checkpoint_saved(self, folder: str) -> None:
        """The trainer saved a checkpoint into ``folder`` on every rank: this rank writes its order state there."""
        order, trainer = self._order, self._trainer
        if order is None or order.seed is None or self._prepared is None:
            state = DataOrder.unstarted_state('transformers', self.data_seed, 1)
        else:
            place, done = saved_place(trainer.state.global_step, self._batches, self._accumulate)
            state = order.state_dict(trainer='transformers', place=(place.epoch, place.batches, done), rng=None)
        write_state(folder, torch_ranks().rank, state)

    # hooks ----------------------------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._trainer is None:
            raise DataOrderError(
                'SamplerSync was given in callbacks=[...] without attach: a TrainerCallback cannot reach the train '
                'loader, the sampler accelerate wraps or the checkpoint folder. Build the trainer with '
                'trainer = SamplerSync(...).attach(Trainer(...)), which adds the callback itself')
        prepared = kwargs.get('train_dataloader')
        if prepared is None:
            return
        inner = base_loader(prepared)
        loader = prepared if inner is None else inner
        self._prepared, self._accumulate = prepared, int(args.gradient_accumulation_steps)
        if self._order is None:  # DataOrder has a length: no truth test
            self._order = DataOrder(loader, self.data_seed, self.check_sharding, self.allow_data_change)
        order = self._order
        if self._loaded is not None:
            order.resume_from(self._loaded)
            self._loaded = None
        batches = self._batches = batches_of(loader, args)
        place = resume_place(state.global_step, batches, self._accumulate)
        inside = 0 < place.batches < batches
        self._refuse_unplaceable(args, place, inside)
        order.start(place.epoch, loader=loader, ranks=torch_ranks(),
                    trainer_seed=args.data_seed if args.data_seed is not None else args.seed, in_flight=inside,
                    mid_epoch=inside, sharding_hint=_HF_SHARDING)
        if order.graph is not None and order.graph.map_style:
            self._check_step(loader)
        placed = order.place(place, batches, accumulate=self._accumulate, terms=_HF_TERMS)
        if placed is not loader:
            if base_loader(prepared) is None:
                raise DataOrderError(
                    'SamplerSync: get_train_dataloader returned a DataLoader that accelerate did not prepare, and '
                    'its batch sampler needs a tap on top that only a new loader can hold; return '
                    'self.accelerator.prepare(loader) from get_train_dataloader')
            replace_base(prepared, placed)
        self._epoch = place.epoch
        self._resume_at = place if inside and order.graph is not None and order.graph.map_style else None

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._order is not None and self._prepared is not None:
            self._epoch = state.global_step // steps_per_epoch(self._batches, self._accumulate)
            self._order.epoch_started(self._epoch)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._order is not None and self._prepared is not None:
            self._order.before_batch(self._epoch, batch_in_epoch(state.global_step, self._epoch, self._batches,
                                                                 self._accumulate))

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._order is not None and self._prepared is not None:
            self._order.epoch_ended(self._epoch)

    # checks -----------------------------------------------------------------------------------------------

    def _refuse_unplaceable(self, args: Any, place: Place, inside: bool) -> None:
        """Refuse a mid-epoch resume that the trainer would not continue at ``place``."""
        if not inside or self._checkpoint is None:
            return
        if args.ignore_data_skip:
            raise DataOrderError(
                f'SamplerSync: the checkpoint was saved at {place}, and ignore_data_skip=True makes the Trainer '
                f'train epoch {place.epoch} again from its first batch, so its first {place.batches} batches would '
                'be trained twice; pass TrainingArguments(ignore_data_skip=False), the default')
        if not has_resume_hook(self._trainer):
            import transformers

            raise DataOrderError(
                f'SamplerSync: transformers {transformers.__version__} has no Trainer.get_resumed_dataloader: its '
                "loop skips the trained batches with accelerate's skip_first_batches, which SamplerSync cannot "
                f"place, so the resume at {place} would draw another order. Resume from a checkpoint saved at an "
                "epoch's end, or use transformers 5.25 (pip install 'composer-sampling[transformers]')")

    def _check_step(self, loader: Any) -> None:
        """Print the global batch on rank 0, and refuse a dataset that cannot fill one optimizer step."""
        order = self._order
        assert order is not None
        layout, ranks = order.layout, torch_ranks()
        if layout.global_batch is None or not layout.data_parallel_ranks:
            return
        device = layout.global_batch // layout.data_parallel_ranks
        step = layout.global_batch * self._accumulate
        size = len(loader.dataset)
        text = (f'{device} per device x {layout.data_parallel_ranks} ranks x {self._accumulate} gradient '
                f'accumulation steps = {step} samples per optimizer step')
        if size < step:
            raise DataOrderError(
                f'SamplerSync: one optimizer step trains {text}, but the train dataset holds {size} samples, so no '
                'step can be filled. Lower per_device_train_batch_size or gradient_accumulation_steps, or train on '
                'fewer ranks')
        if ranks.rank == 0:
            print(f'SamplerSync: global batch {text}; {self._batches} batches per rank per epoch, data seed '
                  f'{order.seed}', flush=True)

