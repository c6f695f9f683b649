"""The data order of one train loader, owned by one object: for any trainer's adapter, and for a loop written by hand.

:class:`DataOrder` agrees on the data seed across ranks, seeds the whole sampler
graph, refuses a graph that does not shard by rank, fingerprints the dataset, gives
every node its epoch, places the loader after a checkpoint at the next sample (no
trained sample is loaded again), restores every rank's RNG state where the run that
never stopped had it, and keeps all of it in one checkpoint state that every adapter
reads. Composer's, Lightning's and the Hugging Face ``SamplerSync`` map their
trainer's events onto it; a loop written by hand, or a Lightning Fabric loop, uses it
directly:

.. code-block:: python

    order = DataOrder(loader, data_seed=17)            # loader: a DataLoader with a DistributedSampler
    if resuming:
        checkpoint = torch.load(path, weights_only=True)
        model.load_state_dict(checkpoint['model'])
        order.load_state_dict(checkpoint['data_order'])
    for epoch in range(order.epoch, epochs):
        order.set_epoch(epoch)
        for batch in order:                             # the loader's batches, placed after a resume
            train_step(batch)
            if time_to_save():
                torch.save({'model': model.state_dict(), 'data_order': order.state_dict()}, path)

``state_dict()`` is called on every rank (it gathers every rank's RNG state); the
state holds plain values only, so ``torch.load(weights_only=True)`` reads it.

Example:
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> from composer_sampling import ResumableDistributedSampler
    >>> data = TensorDataset(torch.arange(8))
    >>> loader = DataLoader(data, batch_size=2, sampler=ResumableDistributedSampler(data, 1, 0))
    >>> order = DataOrder(loader, data_seed=3)
    >>> order.set_epoch(0)
    >>> first = [batch[0].tolist() for batch in order][:2]
    >>> order.set_epoch(0)  # the same epoch again: nothing changes
    >>> state = DataOrder(loader, data_seed=3).state_dict()
    >>> state['trainer'], state['data_seed']
    ('loop', 3)
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import describe, sharding_problem
from composer_sampling._resume import rng_state
from composer_sampling._resume.data_identity import agreed_fingerprint, check_data
from composer_sampling._resume.decide import Layout, Position, blockers
from composer_sampling._resume.loaded import TRAINERS, LoadedOrder, order_state
from composer_sampling._resume.place import Place, current_layout, place_in_epoch, tap_at_top
from composer_sampling._resume.ranks import Ranks, torch_ranks
from composer_sampling._resume.redraw import BatchChain, head_check
from composer_sampling._resume.seeds import Seeder, agreed_seed, set_dataset_epochs
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.errors import DataOrderError
from composer_sampling.permutation import MAX_DATA_SEED

__all__ = ['DataOrder', 'TrainerTerms']

#: When a resumed fit restores this rank's RNG state: where the run that never stopped had it.
_AT_PLACE, _AT_FIRST_BATCH, _AT_EPOCH_START = 'place', 'first batch', 'epoch start'


@dataclasses.dataclass(frozen=True)
class TrainerTerms:
    """How an adapter's trainer names what a refusal speaks of: what counts its place, its gradient accumulation,
    and the way to save checkpoints at optimizer steps only."""

    loop: str = 'the trainer'
    accumulation: str = 'gradient accumulation steps'
    saved_at_steps: str = ''


class DataOrder:
    """The data order of one train loader: seeds, epochs, the place after a resume, the RNG, the checkpoint state.

    Args:
        loader (DataLoader): the train loader, as built for this rank.
        data_seed (int, optional): seed of the data order, in ``[0, 2**64 - 1]``. Default: ``None``, the
            trainer's seed where an adapter gives one; a loop written by hand must give it.
        check_sharding (bool): refuse a graph that does not shard by rank on several ranks. Default: ``True``.
        allow_data_change (bool): resume onto a dataset whose fingerprint differs from the checkpoint's, with a
            warning, instead of refusing it. Default: ``False``.
        replication (int): groups of ``replication`` consecutive ranks read the same data (tensor or sequence
            parallelism). Default: ``1``.

    Every refusal is a :class:`~composer_sampling.DataOrderError` naming what was found and what would work.
    """

    def __init__(self, loader: DataLoader, data_seed: int | None = None, check_sharding: bool = True,
                 allow_data_change: bool = False, *, replication: int = 1) -> None:
        if not isinstance(loader, DataLoader):
            raise TypeError(f'loader must be a torch DataLoader, got {type(loader).__name__}')
        self.data_seed = None if data_seed is None else valid_int('data_seed', data_seed, 0, MAX_DATA_SEED)
        self.check_sharding = valid_bool('check_sharding', check_sharding)
        self.allow_data_change = valid_bool('allow_data_change', allow_data_change)
        self.replication = valid_int('replication', replication, minimum=1)
        self._loader = loader
        self._seeds = Seeder()
        self.checkpoint: LoadedOrder | None = None  # the loaded checkpoint's state
        self._check_pending = False  # the first start after a load checks the data
        self._place_pending = False  # ... and the first placement checks the place
        self.seed: int | None = None  # the data seed in use, once started
        self.graph: GraphSnapshot | None = None
        self.layout = Layout(None, None)
        self.signatures: list[dict[str, Any]] | None = None
        self.fingerprint: Any = None
        self.epoch_set: int | None = None  # the epoch last given to the graph
        self._placed: DataLoader | None = None  # the loader to iterate (a new one around a tap on top of yours)
        self._chain: BatchChain | None = None
        self._first: Place | None = None  # where the trainer's first batch after a placement must be
        self._placed_at: tuple[int, int, int] | None = None  # (epoch, batches, samples) of the last placement
        self._rng: tuple[str, Any] | None = None  # (when, this rank's RNG state) still to restore
        self._ranks: Ranks | None = None
        self._loop_batches = 0  # batches the loop API yielded in its epoch
        self._loop_done = False  # the loop API's pass of its epoch reached its end
        self._loop_started = False

    def __repr__(self) -> str:
        return (f'DataOrder(data_seed={self.data_seed!r}, check_sharding={self.check_sharding!r}, '
                f'allow_data_change={self.allow_data_change!r}, replication={self.replication!r})')

    # the loop written by hand ------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch in progress; after :meth:`load_state_dict`, the epoch the loop continues with."""
        if self.epoch_set is not None:
            return self.epoch_set
        expected = self._expected_place()
        return 0 if expected is None else expected.epoch

    def set_epoch(self, epoch: int) -> None:
        """Give the graph ``epoch``: the first call seeds and places it (after a resume, at the next sample of the
        checkpoint's epoch); the same epoch again changes nothing."""
        epoch = valid_int('epoch', epoch, minimum=0)
        if not self._loop_started:
            self._begin(epoch)
        elif epoch != self.epoch_set:
            self.next_epoch(epoch)  # the placed loader stays: a tap on its top tells the epoch's lists to the chain
            self._loop_batches, self._loop_done = 0, False
            self._restore_rng(_AT_EPOCH_START)

    def __iter__(self) -> Iterator[Any]:
        if not self._loop_started:
            raise DataOrderError('DataOrder: call set_epoch(epoch) before iterating: it seeds and places the loader')
        if self._loop_done:
            raise DataOrderError(f'DataOrder: epoch {self.epoch_set} was iterated to its end; call '
                                 f'set_epoch({(self.epoch_set or 0) + 1}) before the next pass')
        iterator = iter(self._placed or self._loader)
        self._restore_rng(_AT_FIRST_BATCH)  # after the iterator drew its workers' seed, before the first batch
        for batch in iterator:
            self._loop_batches += 1
            yield batch
        self._loop_done = True

    def __len__(self) -> int:
        return len(self._loader)

    def _begin(self, epoch: int) -> None:
        expected = self._expected_place()
        if expected is not None and epoch != expected.epoch:
            raise DataOrderError(
                f'DataOrder: the checkpoint was saved at {expected} (its next batch), so the loop continues with '
                f'set_epoch({expected.epoch}), not set_epoch({epoch}); the epochs between would be skipped or '
                f'trained twice. Start the loop at order.epoch')
        place = Place(epoch, 0 if expected is None else expected.batches)
        batches_in_epoch = _length(self._loader)
        inside = 0 < place.batches < batches_in_epoch
        self.start(epoch, in_flight=inside, mid_epoch=inside)
        self._placed = self.place(place, batches_in_epoch)
        self._loop_started, self._loop_batches, self._loop_done = True, place.batches, False

    def _expected_place(self) -> Place | None:
        """Where the loop continues after the checkpoint: its place, or the next epoch's start when it had ended."""
        if self.checkpoint is None or self.checkpoint.place is None:
            return None
        epoch, batches, done = self.checkpoint.place
        return Place(epoch + 1, 0) if done else Place(epoch, batches)

    # the one fit-start sequence ----------------------------------------------------------------------

    def start(self, epoch: int, *, loader: DataLoader | None = None, graph: GraphSnapshot | None = None,
              ranks: Ranks | None = None,
              trainer_seed: int | None = None, in_flight: bool = False, mid_epoch: bool = False,
              adopting: bool = False, sharding_hint: str = '') -> int:
        """Agree on the data seed on every rank, fingerprint the dataset, seed the whole graph, take its order
        signatures, check them and the data against the loaded checkpoint, lay out the ranks and give every node
        ``epoch``; the seed in use. A collective of ``ranks`` (torch's process group by default).

        Args:
            epoch: the epoch the fit starts in.
            loader: a new loader of the same order (a trainer that builds it again); default: the current one.
            graph: the loader's snapshot, where the adapter shares one with another callback; default: taken here.
            ranks: this process's rank and its gather.
            trainer_seed: the trainer's seed, the data seed when ``data_seed`` is None.
            in_flight: the fit starts after batches of ``epoch`` were trained (seeds of an adopted epoch stay).
            mid_epoch: the fit continues an epoch in flight (a change of the dataset's length is then refused).
            adopting: the checkpoint was written without any of our adapters, inside ``epoch``.
            sharding_hint: what a refusal of a graph that does not shard by rank adds for the trainer's users.
        """
        if loader is not None:
            self._loader = loader
        ranks = self._ranks = ranks or torch_ranks()
        checkpoint, checking = self.checkpoint, self._check_pending
        self._check_pending = False
        fallback = trainer_seed if trainer_seed is not None else self.seed
        if fallback is None and checkpoint is not None:
            fallback = checkpoint.data_seed
        if self.data_seed is None and fallback is None:
            raise DataOrderError('DataOrder has no data seed: pass DataOrder(loader, data_seed=...), the same on every '
                                 'rank')
        if graph is None or graph.loader is not self._loader:
            graph = take_snapshot(self._loader)
        self.graph = graph
        try:
            seed = agreed_seed(fallback if fallback is not None else 0, graph, self.data_seed,
                               None if checkpoint is None else checkpoint.data_seed, self.check_sharding,
                               self.replication, ranks)
        except DataOrderError as error:  # the graph does not shard by rank
            raise DataOrderError(f'{error}{sharding_hint}') from None
        self.fingerprint = agreed_fingerprint(self._loader.dataset, ranks)
        self.epoch_set = epoch
        self._first = None
        if not graph.map_style:
            if checkpoint is not None and checking:
                self._check_data(mid_epoch)
            self.seed = self._seeds.order_iterable(self._loader.dataset, seed, epoch, adopting, self.data_seed)
            return self.seed
        self.seed = seed
        if adopting and in_flight:
            self._seeds.adopt_epoch_in_flight(graph, epoch, seed)
        self._seeds.seed_graph(graph, seed, epoch, in_flight, self.data_seed)
        self.signatures = graph.signatures()
        if checkpoint is not None:
            checkpoint.check_graph(self.signatures, graph.signature_nodes())  # names what changed in the order first
            if checking:
                self._check_data(mid_epoch)
        self.layout = current_layout(graph, self.replication, ranks.world_size)
        graph.set_epoch(epoch)
        return seed

    def _check_data(self, mid_epoch: bool) -> None:
        checkpoint = self.checkpoint
        assert checkpoint is not None
        check_data(checkpoint.fingerprint, self.fingerprint, self.allow_data_change, mid_epoch=mid_epoch,
                   required=checkpoint.fingerprint_required, older_rules=checkpoint.fingerprint_rules_older)

    def sharding_problem(self, world_size: int, rank: int) -> str | None:
        """Why the graph of ``rank`` does not shard as ``world_size`` ranks need (None when it does), as :meth:`start`
        refuses it; asks no other rank and changes nothing, so ``plan`` runs it before training."""
        graph = take_snapshot(self._loader)
        return sharding_problem(graph.root, world_size, rank, self.replication, nodes=graph.active)

    def check_checkpoint(self) -> None:
        """Refuse a loaded checkpoint whose order or data differs from this loader's, as :meth:`start` refuses it;
        asks no other rank and changes nothing, so ``plan`` runs it before training."""
        if self.checkpoint is None:
            return
        graph = take_snapshot(self._loader)
        self.checkpoint.check_graph(graph.signatures(), graph.signature_nodes())
        if self.checkpoint.fingerprint is not None or self.checkpoint.fingerprint_required:
            from composer_sampling._fingerprint import dataset_fingerprint

            with warnings.catch_warnings():
                warnings.simplefilter('ignore')  # the fit start gives allow_data_change's warning
                check_data(self.checkpoint.fingerprint, dataset_fingerprint(self._loader.dataset),
                           self.allow_data_change, required=self.checkpoint.fingerprint_required,
                           older_rules=self.checkpoint.fingerprint_rules_older)

    def next_epoch(self, epoch: int) -> None:
        """A new epoch of the fit: fresh generators, and ``set_epoch`` on every node unless the fit start gave it
        this epoch already (once per node per epoch); an epoch that kept a checkpoint's own seeds ends here."""
        graph = self.graph
        if graph is None or self.seed is None:
            return
        set_before, self.epoch_set = self.epoch_set, epoch
        if not graph.map_style:
            dataset = graph.loader.dataset
            if set_before != epoch and hasattr(dataset, 'set_epoch') and not _is_stream(dataset):
                dataset.set_epoch(epoch)
            return
        kept = self._seeds.epoch_seeds
        if kept is not None and epoch > int(kept['epoch']):
            self._seeds.epoch_seeds = None  # the epoch that kept its samplers' own seeds is over
            self._seeds.seed_graph(graph, self.seed, epoch, in_flight=False, asked=self.data_seed)
        else:
            self._seeds.seed_generators(graph, self.seed, epoch)  # a trainer's spin may have drawn from them
        if set_before != epoch:
            graph.set_epoch(epoch)
            set_dataset_epochs(graph, epoch)

    @property
    def epoch_seeds(self) -> dict[str, Any] | None:
        """The seeds an epoch in flight keeps (a checkpoint written without an adapter), until it ends."""
        return self._seeds.epoch_seeds

    # placing the loader ------------------------------------------------------------------------------

    @property
    def placed(self) -> DataLoader | None:
        """The loader that the last :meth:`place` returned for the trainer to iterate, or ``None`` before it."""
        return self._placed

    def place(self, place: Place, batches_in_epoch: float, *, accumulate: int = 1, last_batch_saved: bool = False,
              stateful: bool | None = None, terms: TrainerTerms | None = None) -> DataLoader:
        """Position the loader at ``place``, where the trainer continues, after the checks of a resume; the loader to
        iterate (a new one when a tap had to go on top of a batch sampler of yours).

        Args:
            place: the epoch and the batches of it each rank trained, as the trainer counts them.
            batches_in_epoch: the batches of an epoch of this loader, as the trainer counts them.
            accumulate: the batches of one optimizer step (a checkpoint between two steps is refused).
            last_batch_saved: the trainer says the checkpoint was saved at its epoch's last batch.
            stateful: the loader resumes its own position (torchdata's ``StatefulDataLoader``); default: whether
                it has ``state_dict`` and ``load_state_dict``.
            terms: the trainer's words for its place, its accumulation and the checkpoints saved at optimizer
                steps, as refusals name them.

        Raises:
            DataOrderError: the checkpoint's state and the trainer disagree on the place, or the resume would not
                train every sample of the epoch once (see the message).
        """
        graph, loader = self.graph, self._loader
        if graph is None:
            raise DataOrderError('DataOrder: call start() before place()')
        if stateful is None:
            stateful = hasattr(loader, 'state_dict') and hasattr(loader, 'load_state_dict')
        checkpoint = self.checkpoint if self._place_pending else None
        self._place_pending = False
        if not graph.map_style:
            return loader
        terms = terms or TrainerTerms()
        saved, samples = self._check_place(place, batches_in_epoch, checkpoint, accumulate, last_batch_saved,
                                           stateful, terms)
        self._placed_at = (place.epoch, place.batches, samples)
        ended = place.after_batches(batches_in_epoch)
        self._first = (Place(place.epoch + 1, 0) if ended else place) if place.batches and not stateful else None
        rebuilt: list[DataLoader] = []
        chain = self._chain = BatchChain() if blockers(graph) and not stateful else None

        def top() -> Any:
            tap, new = tap_at_top(loader, graph, chain)
            if new is not None:
                rebuilt.append(new)
            return tap

        place_in_epoch(graph, Position(0, 0), None, self.layout, top=lambda: None)  # clears an earlier fit's offset
        if place.batches == 0 or stateful:
            if chain is not None:
                top()  # the chain listens from the first batch
        elif ended:  # the trainer resumes at the epoch's end: the rest of this epoch is empty
            tap = top()
            if tap is None:
                raise DataOrderError(f'SamplerSync: {terms.loop} resumes at the end of epoch {place.epoch} and may '
                                         f'draw one more batch from {type(loader).__name__}, whose top cannot be '
                                         "emptied; resume from the next epoch's first checkpoint")
            tap.set_window(0, 0)
        elif chain is not None:
            self._redraw(place, checkpoint, saved, chain, top)
        else:
            chosen = place_in_epoch(graph, Position(place.batches, samples), saved, self.layout, top)
            if chosen.kind == 'spin':
                raise DataOrderError(f'SamplerSync: {chosen.reason}, so the rest of epoch {place.epoch} cannot '
                                         f'continue after batch {place.batches} without loading the trained batches '
                                         'again; give it set_epoch(epoch), or use a sampler of ours')
        self._schedule_rng(checkpoint, place, ended)
        self._placed = rebuilt[0] if rebuilt else loader
        return self._placed

    def _check_place(self, place: Place, batches_in_epoch: float, checkpoint: LoadedOrder | None, accumulate: int,
                     last_batch_saved: bool, stateful: bool, terms: TrainerTerms) -> tuple[Layout, int]:
        """Refuse a place the checkpoint's state disagrees with, or a resume that would not train every sample of
        the epoch once; the layout the checkpoint trained with (this fit's when unknown), and the distinct samples of
        the epoch trained before the place."""
        inside = 0 < place.batches < batches_in_epoch
        unknown = (self.layout if checkpoint is None else checkpoint.layout,
                   place.batches * (self.layout.global_batch or 0))
        if checkpoint is None or checkpoint.place is None:
            if inside and not stateful:
                raise DataOrderError(
                    'SamplerSync: the checkpoint holds no SamplerSync state (it was saved without this callback), '
                    f'and {terms.loop} resumes it inside an epoch, at {place}: the order its batches were drawn in is '
                    'not known, so the rest of the epoch would repeat or skip samples. Resume from a checkpoint saved '
                    "at an epoch's end, or from one saved with SamplerSync in the callbacks")
            return unknown
        epoch, batches, done = checkpoint.place
        ended = done or batches >= batches_in_epoch or last_batch_saved
        if (place.epoch, place.batches) != (epoch, batches) and not (ended and place == Place(epoch + 1, 0)):
            raise DataOrderError(
                f'SamplerSync: its state in the checkpoint was saved at epoch {epoch} after {batches} batches'
                f'{" (the epoch had ended)" if done else ""}, but {terms.loop} resumes at {place}; the state was '
                'edited, or comes from another checkpoint. Resume from a checkpoint SamplerSync saved, unedited')
        if inside and place.batches % accumulate:
            raise DataOrderError(
                f'SamplerSync: the checkpoint was saved at {place}, between two optimizer steps '
                f'({terms.accumulation}={accumulate}); the checkpoint holds no accumulated gradients, so the resumed '
                f'run would step with the gradients of {accumulate - place.batches % accumulate} batches instead of '
                f'{accumulate} and end with other weights. Resume from a checkpoint saved at an optimizer step'
                f'{f" ({terms.saved_at_steps} saves only there)" if terms.saved_at_steps else ""}')
        saved = checkpoint.layout
        samples = checkpoint.samples if checkpoint.samples is not None and place.epoch == epoch else \
            place.batches * (saved.global_batch or self.layout.global_batch or 0)
        if inside and self.layout.global_batch is not None and samples < place.batches * self.layout.global_batch:
            change = (f'{saved.data_parallel_ranks} ranks to {self.layout.data_parallel_ranks}'
                      if saved.data_parallel_ranks not in (None, self.layout.data_parallel_ranks) else
                      f'a global batch of {saved.global_batch} samples to {self.layout.global_batch}')
            raise DataOrderError(
                f'SamplerSync: the checkpoint was saved at {place} on {change}: {terms.loop} counts the rest of the '
                f"epoch from batch {place.batches} of this run's {batches_in_epoch} and would end it before every "
                f'sample was trained. Resume inside an epoch on {saved.data_parallel_ranks} ranks or fewer, with '
                "the same device batch, or from a checkpoint saved at an epoch's end")
        return saved, samples

    def _redraw(self, place: Place, checkpoint: LoadedOrder | None, saved: Layout, chain: BatchChain,
                top: Callable[[], Any]) -> None:
        """Continue a graph that orders by nothing of ours: its trained batches are drawn again and dropped, once
        their digest matches the checkpoint's (see ``_resume/redraw.py``)."""
        assert self.graph is not None and self._ranks is not None
        found, ranks = blockers(self.graph)[0], self._ranks
        digests = None if checkpoint is None else checkpoint.digests
        if digests is None or len(digests) != ranks.world_size or digests[ranks.rank] is None:
            raise DataOrderError(
                f'SamplerSync: {describe(found)} has neither set_epoch nor a generator, and the checkpoint holds no '
                'digest of the index lists trained before it (it was saved by an older release, on another number '
                f'of ranks, or long after its batches were drawn), so the rest of epoch {place.epoch} cannot be '
                f"checked to continue after batch {place.batches}; give it set_epoch(epoch), or resume from a "
                "checkpoint saved at an epoch's end")
        if saved.global_batch not in (None, self.layout.global_batch):
            raise DataOrderError(
                f'SamplerSync: {describe(found)} decides the order of whole batches, so a resume must continue at '
                f'batch {place.batches} of the same batches: the checkpoint trained {saved.global_batch} distinct '
                f'samples a step, this run {self.layout.global_batch}. Resume with global batch {saved.global_batch}')
        tap = top()
        if tap is None:
            raise DataOrderError(f'SamplerSync: {describe(found)} is the top of a loader that cannot be rebuilt, '
                                     'so its trained batches cannot be drawn again')
        expected = digests[ranks.rank]
        assert expected is not None
        tap.set_window(place.batches * tap.group, None, head_check(expected, f'rank {ranks.rank}', chain))

    # the RNG -----------------------------------------------------------------------------------------

    def _schedule_rng(self, checkpoint: LoadedOrder | None, place: Place, ended: bool) -> None:
        """This rank's RNG state of the checkpoint, restored where the run that never stopped had it: now, before
        the trainer creates the epoch's iterator, when the fit starts at an epoch's start; at the next epoch's
        start when it resumes at an epoch's end; else before the first batch, after the iterator is created."""
        self._rng = None
        if checkpoint is None or checkpoint.rng is None or self._ranks is None:
            return
        ranks = self._ranks
        if len(checkpoint.rng) != ranks.world_size:
            warnings.warn(f'SamplerSync: the checkpoint holds the RNG states of {len(checkpoint.rng)} ranks and this '
                          f'run has {ranks.world_size}, so the RNG state is not restored: dropout and random '
                          'augmentations continue from a new state, while the samples continue in their order',
                          stacklevel=4)
            return
        entry = checkpoint.rng[ranks.rank]
        if place.batches == 0:
            rng_state.restore(entry)
        else:
            self._rng = (_AT_EPOCH_START if ended else _AT_FIRST_BATCH, entry)

    def _restore_rng(self, moment: str) -> None:
        if self._rng is not None and self._rng[0] == moment:
            rng_state.restore(self._rng[1])
            self._rng = None

    # the trainer's events after a placement ----------------------------------------------------------

    def epoch_started(self, epoch: int) -> None:
        """The trainer starts ``epoch``: refuse it if no batch came where the placement put the loader, restore
        an RNG state kept for this moment, and give the graph its epoch."""
        first = self._first
        if first is not None and first.epoch != epoch:
            raise DataOrderError(f'SamplerSync placed the train loader at {first}, but the trainer starts epoch '
                                 f'{epoch} before training a batch there; the samples would not be the ones it '
                                 'expects')
        self._restore_rng(_AT_EPOCH_START)
        self.next_epoch(epoch)

    def before_batch(self, epoch: int, batch: int) -> None:
        """The trainer is about to train batch ``batch`` of ``epoch``: the first one after a placement must be
        where the loader was placed; the RNG state kept for it is restored."""
        first, self._first = self._first, None
        if first is not None and (epoch, batch) != (first.epoch, first.batches):
            raise DataOrderError(f'SamplerSync placed the train loader at {first}, but the trainer resumed at '
                                 f'epoch {epoch}, batch {batch}; the samples would not be the ones it expects')
        self._restore_rng(_AT_FIRST_BATCH)

    def epoch_ended(self, epoch: int) -> None:
        """The trainer ends ``epoch``: refuse it if no batch came where the placement put the loader."""
        first = self._first
        if first is not None and first.epoch == epoch:
            raise DataOrderError(f'SamplerSync placed the train loader at {first}, but the trainer ended epoch '
                                 f'{epoch} before training a batch there')

    # the checkpoint ----------------------------------------------------------------------------------

    def state_dict(self, *, trainer: str = 'loop', place: tuple[int, int, bool] | None = None,
                   rng: list[Any] | bool | None = True, rng_batch: int | None = None) -> dict[str, Any]:
        """The state a checkpoint keeps, in the schema every adapter reads; a collective on every rank (each rank's
        RNG state and digest are gathered).

        Args:
            trainer: the adapter writing it (``'loop'``, ``'lightning'``, ``'composer'``, ``'transformers'``).
            place: ``(epoch, batches trained in it, whether it had ended)``; default: the loop's own count.
            rng: every rank's RNG state as the adapter keeps it; ``True`` (default): gathered here.
            rng_batch: the trainer's batch count the RNG states belong to, where it has one.
        """
        if trainer not in TRAINERS:
            raise ValueError(f'trainer must be one of {", ".join(TRAINERS)}, got {trainer!r}')
        started = self.seed is not None
        ranks = self._ranks or torch_ranks()
        if place is None and self._loop_started and self.epoch_set is not None:
            batches_in_epoch = _length(self._loader)
            place = (self.epoch_set, self._loop_batches, self._loop_done or self._loop_batches >= batches_in_epoch)
        if rng is True:
            rng = ranks.all_gather(rng_state.capture()) if started else None
        samples = None if place is None else self._samples_at(place[0], place[1])
        digests = None
        if self._chain is not None and place is not None:
            _, batches, done = place
            digests = ranks.all_gather(None if done else self._chain.after(batches))
        return order_state(trainer=trainer, data_seed=self.seed if started else self.data_seed,
                           signatures=self.signatures, replication=self.replication, layout=self.layout,
                           fingerprint=self.fingerprint, place=place if started else None,
                           rng=rng if isinstance(rng, list) else None, rng_batch=rng_batch,
                           epoch_seeds=self._seeds.epoch_seeds, digests=digests, samples=samples)

    def _samples_at(self, epoch: int, batches: int) -> int:
        """The distinct samples of ``epoch`` trained across the data-parallel ranks after ``batches`` of the
        trainer's batches: counted from the last placement in that epoch, whose batches may have been of another
        size (a resume on another number of ranks)."""
        size = self.layout.global_batch or 0
        placed = self._placed_at
        if placed is not None and placed[0] == epoch and batches >= placed[1]:
            return placed[2] + (batches - placed[1]) * size
        return batches * size

    @staticmethod
    def unstarted_state(trainer: str, data_seed: int | None, replication: int,
                        epoch_seeds: dict[str, Any] | None = None) -> dict[str, Any]:
        """The state of an adapter whose fit has placed no loader yet (a checkpoint saved before any fit): its data
        seed, and the seeds an epoch in flight keeps when a checkpoint loaded before holds them."""
        return order_state(trainer=trainer, data_seed=data_seed, signatures=None, replication=replication,
                           layout=Layout(None, None), fingerprint=None, place=None, rng=None, rng_batch=None,
                           epoch_seeds=epoch_seeds, digests=None)

    def summary(self, seed_source: str) -> str:
        """The run summary of the started order: the data seed and where it came from, the sampler graph (or the
        iterable dataset that orders itself)."""
        graph = self.graph
        if graph is None or self.seed is None:
            return 'composer-sampling run summary: the order has not started'
        if graph.map_style:
            from composer_sampling._proofs.summary import summarize

            return summarize(graph.loader, data_seed=self.seed, seed_source=seed_source, graph=graph)
        dataset = graph.loader.dataset
        shuffle = f' with shuffle_seed {dataset.shuffle_seed}' if _is_stream(dataset) else ''
        return (f'composer-sampling run summary\n  data seed  {self.seed} ({seed_source})\n  dataset    '
                f'{type(dataset).__name__}, an iterable dataset that orders itself{shuffle}')

    def load_state_dict(self, state: dict[str, Any], *, reader: str = 'DataOrder') -> None:
        """Load a state :meth:`state_dict` (or an adapter's ``SamplerSync``) wrote; the next start checks the
        data, the order and the place against it.

        Raises:
            DataOrderError: a state this release cannot read, or one edited (naming the key).
        """
        try:
            loaded = LoadedOrder.read(state, reader=reader)
        except DataOrderError:
            raise
        except (TypeError, ValueError) as error:
            raise DataOrderError(str(error)) from None
        self.resume_from(loaded)

    def resume_from(self, loaded: LoadedOrder) -> None:
        """Take a checkpoint's state that an adapter has read already (see :meth:`load_state_dict`)."""
        self.checkpoint = loaded
        self.epoch_set = None  # the loop continues at the checkpoint's epoch (``epoch``)
        self._check_pending = self._place_pending = True
        self._seeds.epoch_seeds = loaded.epoch_seeds
        self._loop_started = False


def _length(loader: DataLoader) -> float:
    """The batches of an epoch of ``loader``; infinite when it has no length."""
    try:
        return len(loader)
    except TypeError:
        return float('inf')


def _is_stream(dataset: Any) -> bool:
    from composer_sampling._graph.seeding import is_streaming_dataset

    return is_streaming_dataset(dataset)
