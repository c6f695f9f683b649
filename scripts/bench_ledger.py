"""What the sample ledger and SamplerSync cost a training step: the digits recipe with each, and without.

    .venv/bin/python scripts/bench_ledger.py [--repeats 15] [--recipe yamls/digits.yaml] [--threads 1]

Every fit runs in this process through the recipe runner's own builders
(``resolve``, ``build_run``, ``build_trainer``: what ``composer-sampling train``
runs, the ledger added by the override ``callbacks.sample_ledger={folder: ...}``,
a checkpoint saver by ``save_folder=... save_interval=1ep``). Five variants, side by
side in every round (their order turned each round, after one warm-up round, so
that a drift in the machine's speed falls on all alike): no callback of ours (the
recipe's SamplerSync taken out), an empty ``Callback()``, ``SampleLedger``, a
``CheckpointSaver`` that saves every epoch, and that saver with ``SamplerSync`` (a
saver that saves rarely, so that what SamplerSync spends every batch shows). A
clock callback, first in the Trainer's list, stamps every ``batch_start``:

* **step**: one ``batch_start`` to the next inside an epoch: the DataLoader's fetch,
  forward, backward, the optimizer and every callback; median over a fit's steps,
  as the main thread's CPU time and as wall time;
* **whole fit / batches**: ``fit_start`` to ``fit_end`` (CPU), epoch starts and the
  per-epoch evaluation included.

In two more fits a round, the ledger's and SamplerSync's own time is taken where it
is spent: ``run_event`` of the instance (every event Composer hands it, Composer's
dispatch into the callback included) and the listener the index tap tells every
batch (the ``tell`` of the ledger's index source), wrapped on the instance. The tap's walk of each
batch's indices on their way to the DataLoader (the ``IndexTap`` path that runs
only when someone listens) is timed apart, over whole passes of the recipe's train
batch sampler with and without a listener.

The step is the digits recipe's tiny MLP on CPU, about 2 ms: the hardest
denominator a ledger will meet. ``--threads 1`` (the default) sets torch's
intra-op threads: on this 2-core machine shared with other jobs, two threads
oversubscribe it and the step swings between 10 and 100 ms, which would hide any
cost in noise.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_report import write_section

ROOT = Path(__file__).resolve().parent.parent


def clock_callback() -> Any:
    """A callback stamping every ``batch_start`` (CPU and wall) and the fit's start and end (CPU)."""
    from composer.core import Callback, State
    from composer.loggers import Logger

    class Clock(Callback):
        def __init__(self) -> None:
            self.steps: dict[str, list[float]] = {'cpu': [], 'wall': []}
            self.batches = 0
            self.fit = 0.0
            self._last: tuple[float, float] | None = None

        def fit_start(self, state: State, logger: Logger) -> None:
            self.fit = time.thread_time()

        def epoch_start(self, state: State, logger: Logger) -> None:
            self._last = None  # an interval across an epoch's end holds the evaluation

        def batch_start(self, state: State, logger: Logger) -> None:
            now = time.thread_time(), time.perf_counter()
            if self._last is not None:
                self.steps['cpu'].append(now[0] - self._last[0])
                self.steps['wall'].append(now[1] - self._last[1])
            self._last = now
            self.batches += 1

        def fit_end(self, state: State, logger: Logger) -> None:
            self.fit = time.thread_time() - self.fit

    return Clock()


def timed(calls: list[float], handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler``, appending the seconds each call takes to ``calls`` (``perf_counter``: a few tens of ns a read)."""
    @functools.wraps(handler)
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return handler(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - started)
    return run


def instrument(callback: Any) -> dict[str, list[float]]:
    """Time each event Composer hands ``callback`` (through ``run_event``) and a ledger's tap listener ``tell``."""
    calls: dict[str, list[float]] = {}
    run_event = callback.run_event

    def timed_event(event: Any, state: Any, logger: Any) -> None:
        timed(calls.setdefault(str(event.value), []), run_event)(event, state, logger)

    callback.run_event = timed_event
    source = getattr(callback, '_indices', None)  # a SampleLedger's IndexSource, whose tell the tap calls
    if source is not None:
        source.tell = timed(calls.setdefault('_tell', []), source.tell)
    return calls


def own_per_batch(calls: dict[str, list[float]], batches: int) -> float:
    """Seconds per batch of the calls :func:`instrument` timed: each kind of call at its median, as often as it came
    (robust to a preempted call)."""
    return sum(statistics.median(times) * len(times) for times in calls.values()) / batches


#: The fits of a round: no callback of ours, a ``Callback()`` that does nothing, the ledger, a checkpoint saver
#: alone (every epoch), and that saver with SamplerSync.
VARIANTS = ('none', 'empty', 'ledger', 'saver', 'sync')
#: What the recipe's overrides add to each variant (``{folder}`` filled per fit); SamplerSync is kept only in sync.
OVERRIDES = {'ledger': ['callbacks.sample_ledger={{folder: {folder}}}'],
             'saver': ['save_folder={folder}', 'save_interval=1ep'],
             'sync': ['save_folder={folder}', 'save_interval=1ep']}


def one_fit(recipe_path: str, variant: str, folder: Path, timing: bool = False) -> dict[str, float]:
    """Fit the recipe once as ``variant`` (see :data:`VARIANTS`), writing into ``folder``; with ``timing``, the calls
    of the ledger (variant ``ledger``), of SamplerSync (variant ``sync``) or of the empty callback (``empty``) are timed
    where they run."""
    from composer.core import Callback

    from composer_sampling import SampleLedger, SamplerSync
    from composer_sampling.recipes.build_composer_parts import build_trainer_parts
    from composer_sampling.recipes.build_training import build_run, build_trainer
    from composer_sampling.recipes.resolve import resolve
    from composer_sampling.recipes.schema import load_recipe

    overrides = [item.format(folder=folder) for item in OVERRIDES.get(variant, [])]
    run = build_run(resolve(load_recipe(recipe_path, overrides)))
    parts = build_trainer_parts(run.spec, run.checked.checkpoints if run.checked is not None else None)
    callbacks = parts.callbacks
    if variant != 'sync':
        callbacks[:] = [callback for callback in callbacks if not isinstance(callback, SamplerSync)]
    kind = {'ledger': SampleLedger, 'sync': SamplerSync}.get(variant)
    ours = [callback for callback in callbacks if isinstance(callback, (SampleLedger, SamplerSync))]
    if [type(callback) for callback in ours] != ([] if kind is None else [kind]):
        raise RuntimeError(f'the recipe did not build the callbacks of {variant!r}: {callbacks}')
    clock = clock_callback()
    callbacks.insert(0, clock)
    if variant == 'empty':
        callbacks.append(Callback())
    calls = instrument(callbacks[-1] if variant == 'empty' else ours[0]) if timing else {}
    trainer = build_trainer(run, parts)
    trainer.fit()
    trainer.close()
    own = own_per_batch(calls, clock.batches)
    # the events Composer hands it at every batch (not fit_start, epoch_start, the saves...), at their medians
    every_batch = sum(statistics.median(times) * len(times) / clock.batches for times in calls.values()
                      if len(times) >= clock.batches)
    return {'cpu': statistics.median(clock.steps['cpu']), 'wall': statistics.median(clock.steps['wall']),
            'fit': clock.fit / clock.batches, 'batches': clock.batches, 'own': own, 'every_batch': every_batch,
            'batch_end': statistics.median(calls['batch_end']) if 'batch_end' in calls else 0.0,
            'once': sum(max(times) for name, times in calls.items() if name == 'fit_start')}


def tap_walk(recipe_path: str, passes: int) -> tuple[float, float, int]:
    """Seconds per batch of a pass of the recipe's train batch sampler: under a silent tap, under a listened one."""
    from composer_sampling._graph.index_tap import install_tap
    from composer_sampling.recipes.build_training import build_run
    from composer_sampling.recipes.resolve import resolve
    from composer_sampling.recipes.schema import load_recipe

    batches = build_run(resolve(load_recipe(recipe_path, []))).train_loader.batch_sampler
    tap = install_tap(batches, 'sampler', group=batches.batch_size, keep_partial=not batches.drop_last)
    count = len(batches)
    times: dict[bool, list[float]] = {False: [], True: []}

    def listener(number: int, indices: list[int]) -> None:
        pass

    for _ in range(passes):
        for listened in (False, True):
            if listened:
                tap.listen(listener)
            started = time.thread_time()
            for _ in batches:
                pass
            times[listened].append((time.thread_time() - started) / count)
            tap.forget(listener)
    return statistics.median(times[False]), statistics.median(times[True]), count


#: What timing the pieces showed when this script was written (its tables are measured on every run).
FINDINGS = """\
Where the time went. Timed piece by piece inside the trainer, every call of `batch_end` cost several times what it
costs in a tight loop (the step has just pushed its code and data out of the caches). Up to commit 050b215,
`batch_end` turned each batch's index list (Python ints from the sampler graph) into a numpy array, checked its
range with numpy's `min` and `max`, and converted it again to the file's width: 38-44 us in `batch_end`, 52-58 us
of the ledger's own time a batch (3.0-3.1% of the step). Then the list stayed a list (checked with the builtins,
packed by `array`): 28 us in `batch_end`, 43 us of own time (2.2% of the step), of which some 40% was the one
`os.write` of each record, 30% packing and checksumming it, 15% the range check.

Now `batch_end` appends the list to the records held in memory. They are checked, packed and written in one
system call (`LedgerWriter.extend`: the bytes one `append` a record wrote; the range checked on the packed bytes,
in one numpy pass for all of them) when Composer's save takes the ledger's state (`state_dict`: on every rank,
before a byte of the checkpoint file is written, whatever the order of the callbacks), at every epoch's end, at
fit end, when the Trainer is closed, and once 2**18 indices are held. A process killed loses only the batches no
checkpoint holds, which a resume trains again. A fit's first batch is still checked at once, so a wrong
`index_key` stops the run there; a later index outside the dataset stops it at the write, before a checkpoint
holds its batch, with the same message. `run_event` calls only the handlers that do something (9 of a batch's 13
events have none). Asking the saver at each batch whether it is about to save was no option: its `save_interval`
costs about 30 us per call here (Composer computes the elapsed fraction of the run), more than the ledger's budget;
the saver itself pays that every batch (the "saver" rows).

Side by side with the code before this change (commit 918245b, its package unpacked with `git archive` and imported
instead, in alternating processes, three timed ledger fits and three fits with no callback each after a warm-up
pair, five processes of each, while the machine ran at a load of 7-9 on its 2 cores, as in the run of the tables
above, where the step took three times the 2 ms it takes on an idle machine): `batch_end` took 72-102 us per call
before and 9-19 us after; the ledger's own time 104-156 us per batch before, 45-98 us after; as a share of the step
with no callback measured in the same process, 1.54-2.02% (median 1.86%) before and 0.93-1.05% (median 0.94%)
after. The "SampleLedger - no callback" row holds more than the ledger's own time: the empty callback's engine cost
and the index tap the ledger installs on the batch sampler (the listened walk above, which SamplerSync installs
too), and, at this load, noise of a hundred microseconds between medians.

The ledger's own time ({own:.1f} us in this run) is under 1% of any step of {floor:.1f} ms or more. The step
grows by more than that: Composer's engine spends some tens of microseconds a batch on any callback, one that does
nothing included (the "empty callback" rows): for each callback and each of the ~14 events of a batch it formats
a debug-log timestamp before checking whether to log it. That cost is Composer's, not the ledger's to remove."""


def measure(recipe_path: str, repeats: int) -> dict[str, list[dict[str, float]]]:
    """``repeats`` rounds after a warm-up: the variants (order turned each round), then the timed ledger and sync."""
    timed = ('empty', 'ledger', 'sync')
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in
                                                  (*VARIANTS, *(f'{variant} timed' for variant in timed))}
    root = Path(tempfile.mkdtemp(prefix='bench-ledger-'))
    try:
        for repeat in range(repeats + 1):
            turn = repeat % len(VARIANTS)
            for variant in VARIANTS[turn:] + VARIANTS[:turn]:
                result = one_fit(recipe_path, variant, root / f'{variant}-{repeat}')
                if repeat:  # the first round warms the caches and the imports
                    results[variant].append(result)
            if repeat:
                for variant in timed:
                    results[f'{variant} timed'].append(one_fit(recipe_path, variant, root / f'timed-{variant}-{repeat}',
                                                               timing=True))
            for folder in root.iterdir():
                shutil.rmtree(folder)  # the checkpoints of a round
    finally:
        shutil.rmtree(root)
    return results


def median_of(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def report(results: dict[str, list[dict[str, float]]], walk: tuple[float, float, int], repeats: int,
           threads: int) -> str:
    """The markdown body: the steps side by side, what each callback adds, and the ledger's own time per batch."""
    us, step = 1e6, median_of(results['none'], 'cpu')
    rows = ['| per batch | no callback | an empty callback | SampleLedger | a saver (every epoch) | '
            'the saver and SamplerSync |', '| --- | ---: | ---: | ---: | ---: | ---: |']
    for key, label in (('cpu', 'step, CPU'), ('wall', 'step, wall'), ('fit', 'whole fit / batches, CPU')):
        cells = ' | '.join(f'{median_of(results[variant], key) * us:,.0f} us' for variant in VARIANTS)
        rows.append(f'| {label} | {cells} |')

    def added(variant: str, base: str) -> str:
        extra = median_of(results[variant], 'cpu') - median_of(results[base], 'cpu')
        return f'{extra * us:+,.0f} us | {extra / step:+.2%}'

    ledger, batch_end = median_of(results['ledger timed'], 'own'), median_of(results['ledger timed'], 'batch_end')
    sync, sync_end = median_of(results['sync timed'], 'own'), median_of(results['sync timed'], 'batch_end')
    empty = median_of(results['empty timed'], 'own')
    every = {variant: median_of(results[f'{variant} timed'], 'every_batch') for variant in ('empty', 'ledger', 'sync')}
    silent, listened, count = walk
    walked = listened - silent
    own = ledger + walked
    rows += ['', '| added to the CPU step (medians) | per batch | share of the step |', '| --- | ---: | ---: |',
             f'| an empty callback - no callback | {added("empty", "none")} |',
             f'| SampleLedger - no callback | {added("ledger", "none")} |',
             f'| the saver - no callback | {added("saver", "none")} |',
             f'| SamplerSync: the saver and SamplerSync - the saver | {added("sync", "saver")} |',
             '', '| their own time, where it runs | per batch | share of the step |', '| --- | ---: | ---: |',
             f'| an empty callback: every event Composer hands it (the anchor) | {empty * us:.1f} us | '
             f'{empty / step:.2%} |',
             f'| SampleLedger: `batch_end` (median call) | {batch_end * us:.1f} us | {batch_end / step:.2%} |',
             f'| SampleLedger: every event Composer hands it, and its tap listener | {ledger * us:.1f} us | '
             f'{ledger / step:.2%} |',
             f'| SampleLedger: the tap walking each batch\'s indices for the listener ({silent * us:.1f} us silent, '
             f'{listened * us:.1f} us listened) | {walked * us:+.1f} us | {walked / step:+.2%} |',
             f'| **SampleLedger, all of it** | **{own * us:.1f} us** | **{own / step:.2%}** |',
             f'| SamplerSync: `batch_end` (median call) | {sync_end * us:.1f} us | {sync_end / step:.2%} |',
             f'| **SamplerSync: every event Composer hands it** | **{sync * us:.1f} us** | **{sync / step:.2%}** |',
             f'| SamplerSync beyond the empty callback | {(sync - empty) * us:+.1f} us | '
             f'{(sync - empty) / step:+.2%} |',
             f'| SampleLedger beyond the empty callback (all of it) | {(own - empty) * us:+.1f} us | '
             f'{(own - empty) / step:+.2%} |',
             '', '| only the events of every batch (no fit start, epoch start or save) | per batch | beyond the '
             'empty callback |', '| --- | ---: | ---: |',
             *(f'| {label} | {every[variant] * us:.1f} us | {(every[variant] - every["empty"]) * us:+.1f} us |'
               for variant, label in (('empty', 'an empty callback'), ('sync', 'SamplerSync'),
                                      ('ledger', 'SampleLedger (its `_tell` included)')))]
    once, batches = median_of(results['ledger timed'], 'once'), results['ledger'][0]['batches']
    findings = '\n\n'.join(part.replace('\n', ' ') for part in FINDINGS.split('\n\n'))
    findings = findings.format(own=own * us, floor=own * 100 * 1e3)
    return '\n'.join(rows) + (
        f'\n\nMedians over {repeats} rounds, after a warm-up round; in each round, in turns: a fit with no callback of '
        'ours (the recipe\'s SamplerSync taken out), one with a `Callback()` that does nothing, one with the ledger '
        '(no saver: it writes at each epoch\'s end), one with a `CheckpointSaver` saving every epoch, and one with '
        'that saver and SamplerSync; then an empty-callback fit, a ledger fit and a SamplerSync fit with their calls '
        'timed. '
        f'{batches:.0f} batches a fit (4 epochs of batch 64), torch intra-op threads: {threads}; the machine was '
        'shared with other jobs. "step" is one `batch_start` to the next inside an epoch (a save at an epoch\'s end '
        'falls outside); CPU is the main thread\'s CPU time. Shares are of the median CPU step with no callback. '
        'Own time: the callback\'s calls where they run (`run_event` of the instance: every event, Composer\'s '
        'dispatch into the callback included; the ledger\'s `_tell`), each kind of call at its median, as often as '
        f'it came per batch; `fit_start` (once a fit, {once * 1e3:.1f} ms for the ledger) and the writes are in it, '
        f'spread over the fit. The tap walk: whole passes of the train batch sampler ({count} batches) without and '
        'with a listener, medians over 20 passes.\n\n' + findings)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repeats', type=int, default=15)
    parser.add_argument('--recipe', default='yamls/digits.yaml')
    parser.add_argument('--threads', type=int, default=1, help='torch intra-op threads (see the docstring)')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings('ignore', message='Cannot split tensor of length')  # as the recipe runner does
    recipe = str(ROOT / args.recipe)
    walk = tap_walk(recipe, 20)
    results = measure(recipe, args.repeats)
    command = (f'.venv/bin/python scripts/bench_ledger.py --repeats {args.repeats} --recipe {args.recipe} '
               f'--threads {args.threads}')
    write_section('bench_ledger.py', command, report(results, walk, args.repeats, args.threads))


if __name__ == '__main__':
    main()
