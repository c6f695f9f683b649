"""What the sample ledger costs a training step: the digits recipe with and without ``callbacks.sample_ledger``.

    .venv/bin/python scripts/bench_ledger.py [--repeats 15] [--recipe yamls/digits.yaml] [--threads 1]

Every fit runs in this process through the recipe runner's own builders
(``resolve``, ``build_run``, ``build_trainer``: what ``composer-sampling train``
runs, the ledger added by the override ``callbacks.sample_ledger={folder: ...}``),
the two variants interleaved (without, with, with, without, ...) after one warm-up
round, so that a drift in the machine's speed falls on both alike. A clock callback,
first in the Trainer's list, stamps every ``batch_start``:

* **step**: one ``batch_start`` to the next inside an epoch: the DataLoader's fetch,
  forward, backward, the optimizer and every callback, the ledger's included;
  median over a fit's steps, as the main thread's CPU time and as wall time;
* **whole fit / batches**: ``fit_start`` to ``fit_end`` (CPU), epoch starts and the
  per-epoch evaluation included.

Within the ledger fits, the ledger's own time is taken where it is spent:
``run_event`` of the ``SampleLedger`` instance (every event Composer hands it,
Composer's dispatch into the callback included) and the listener the index tap
tells every batch (``_tell``), both wrapped on the instance. The tap's walk of
each batch's indices on their way to the DataLoader (the ``IndexTap`` path that
runs only when someone listens) is timed apart, over whole passes of the recipe's
train batch sampler with and without a listener.

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


def instrument(ledger: Any) -> dict[str, list[float]]:
    """Time each event Composer hands ``ledger`` (through ``run_event``) and its tap listener ``_tell``."""
    calls: dict[str, list[float]] = {}
    run_event = ledger.run_event

    def timed_event(event: Any, state: Any, logger: Any) -> None:
        timed(calls.setdefault(str(event.value), []), run_event)(event, state, logger)

    ledger.run_event = timed_event
    ledger._tell = timed(calls.setdefault('_tell', []), ledger._tell)
    return calls


def one_fit(recipe_path: str, folder: Path | None, timing: bool = False, empty: bool = False) -> dict[str, float]:
    """Fit the recipe once, with the ledger in ``folder`` (its time taken with ``timing``) or without a ledger.

    ``empty`` adds a callback that does nothing: what Composer's engine spends on any callback.
    """
    from composer.core import Callback

    from composer_sampling import SampleLedger
    from composer_sampling.recipes.build_training import build_run, build_trainer
    from composer_sampling.recipes.resolve import resolve
    from composer_sampling.recipes.schema import load_recipe

    overrides = [] if folder is None else [f'callbacks.sample_ledger={{folder: {folder}}}']
    run = build_run(resolve(load_recipe(recipe_path, overrides)))
    ledgers = [callback for callback in run.callbacks if isinstance(callback, SampleLedger)]
    if len(ledgers) != (folder is not None):
        raise RuntimeError(f'the recipe override did not add (or left) the sample ledger: {run.callbacks}')
    calls = instrument(ledgers[0]) if timing else {}
    clock = clock_callback()
    run.callbacks.insert(0, clock)
    if empty:
        run.callbacks.append(Callback())
    trainer = build_trainer(run)
    trainer.fit()
    trainer.close()
    # per batch: each kind of call at its median, as often as it came (robust to a preempted call)
    ledger = sum(statistics.median(times) * len(times) for times in calls.values()) / clock.batches
    return {'cpu': statistics.median(clock.steps['cpu']), 'wall': statistics.median(clock.steps['wall']),
            'fit': clock.fit / clock.batches, 'batches': clock.batches, 'ledger': ledger,
            'batch_end': statistics.median(calls['batch_end']) if calls else 0.0,
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


VARIANTS = ('without', 'empty', 'with')
#: What timing the pieces showed when this script was written (its tables are measured on every run).
FINDINGS = """\
Where the time went. Timed piece by piece inside the trainer, every numpy call of `batch_end` cost several times
what it costs in a tight loop (the step has just pushed its code and data out of the caches). Up to commit 050b215,
`batch_end` turned each batch's index list (Python ints from the sampler graph) into a numpy array, checked its
range with numpy's `min` and `max`, and converted it again to the file's width: this script measured `batch_end` at
38-44 us and the ledger's time at 52-58 us a batch there (3.0-3.1% of the step), run back to back with the code
after it. Since then the list stays a list: `validate.first_outside` checks it with the builtins and
`LedgerWriter.append` packs it with `array`, the same bytes (`tests/ledger/test_ledger.py` checks them against numpy's).
Of what is left in `batch_end` (about 21 us when it was written), some 40% is the one `os.write` of the record, 30%
packing and checksumming it, 15% the range check. The write stays one system call a batch: holding records back
until a checkpoint would save most of its share, but a killed process would lose the records since its last flush.

The target of 1% is not met on this step. The digits MLP takes under 2 ms of CPU a step, about as small a step as a
ledger will meet; the ledger's own time (handlers, listener and tap walk: {own:.0f} us in this run) is under 1% of any
step of {floor:.1f} ms or more. The step grows by more than that: Composer's engine spends about 40 us a batch on
any callback, one that does nothing included (the "empty callback" column): for each callback and each of the ~14
events of a batch it formats a debug-log timestamp before checking whether to log it. That cost is Composer's, not
the ledger's to remove."""


def measure(recipe_path: str, repeats: int) -> dict[str, list[dict[str, float]]]:
    """``repeats`` rounds after a warm-up: the variants (order turned each round), then a timed ledger fit."""
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in (*VARIANTS, 'timed')}
    folder = Path(tempfile.mkdtemp(prefix='bench-ledger-'))
    try:
        for repeat in range(repeats + 1):
            for variant in VARIANTS[repeat % 3:] + VARIANTS[:repeat % 3]:
                result = one_fit(recipe_path, folder / f'ledger-{repeat}' if variant == 'with' else None,
                                 empty=variant == 'empty')
                if repeat:  # the first round warms the caches and the imports
                    results[variant].append(result)
            if repeat:
                results['timed'].append(one_fit(recipe_path, folder / f'timed-{repeat}', timing=True))
    finally:
        shutil.rmtree(folder)
    return results


def median_of(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def report(results: dict[str, list[dict[str, float]]], walk: tuple[float, float, int], repeats: int,
           threads: int) -> str:
    """The markdown body: the steps side by side, and the ledger's own time per batch against the step."""
    us, step = 1e6, median_of(results['without'], 'cpu')
    rows = ['| per batch | without ledger | an empty callback | with ledger | ledger - without | share of the step |',
            '| --- | ---: | ---: | ---: | ---: | ---: |']
    for key, label in (('cpu', 'step, CPU'), ('wall', 'step, wall'), ('fit', 'whole fit / batches, CPU')):
        without, empty, with_ = (median_of(results[variant], key) for variant in VARIANTS)
        rows.append(f'| {label} | {without * us:,.0f} us | {empty * us:,.0f} us | {with_ * us:,.0f} us | '
                    f'{(with_ - without) * us:+,.0f} us | {(with_ - without) / step:+.2%} |')
    ledger, batch_end = median_of(results['timed'], 'ledger'), median_of(results['timed'], 'batch_end')
    silent, listened, count = walk
    walked = listened - silent
    own = ledger + walked
    rows += ['', '| the ledger\'s own time | per batch | share of the step |', '| --- | ---: | ---: |',
             f'| `batch_end` (median call) | {batch_end * us:.1f} us | {batch_end / step:.2%} |',
             f'| every event Composer hands it, and its tap listener | {ledger * us:.1f} us | {ledger / step:.2%} |',
             f'| the tap walking each batch\'s indices for the listener ({silent * us:.1f} us silent, '
             f'{listened * us:.1f} us listened) | {walked * us:+.1f} us | {walked / step:+.2%} |',
             f'| **all of it** | **{own * us:.1f} us** | **{own / step:.2%}** |']
    once, batches = median_of(results['timed'], 'once'), results['with'][0]['batches']
    findings = '\n\n'.join(part.replace('\n', ' ') for part in FINDINGS.split('\n\n'))
    findings = findings.format(own=own * us, floor=own * 100 * 1e3)
    return '\n'.join(rows) + (
        f'\n\nMedians over {repeats} rounds (a fit without the ledger, one with a `Callback()` that does nothing, '
        f'one with the ledger, in turns, and one with its calls timed), after a warm-up round; {batches:.0f} batches '
        f'a fit (4 epochs of batch 64), torch intra-op threads: {threads}. "step" is one `batch_start` to the next '
        'inside an epoch; '
        'CPU is the main thread\'s CPU time. Shares are of the median CPU step without the ledger. The second '
        'table times the ledger\'s calls where they run (`run_event` of the instance: every event, Composer\'s '
        'dispatch into the callback included; `_tell`), each kind of call at its median, as often as it came per '
        f'batch; `fit_start` (once a fit, {once * 1e3:.1f} ms) and the file\'s creation are in it, spread over the '
        f'fit. The tap walk: whole passes of the train batch sampler ({count} batches) without and with a '
        'listener, medians over 20 passes.\n\n' + findings)


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
