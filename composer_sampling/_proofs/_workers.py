"""The counted proof's ranks counted in worker processes, each a run of ranks, their counts merged.

Every rank's loader is already built in this process, often by the user's own
code (a ``make_loader`` closure, a dataset that does not pickle), so the workers
are forked: each starts with the loaders as they are, iterates only its own run of
ranks and counts their indices into its own planes in shared memory
(:class:`~composer_sampling._proofs.counting.RankOverlap` over an anonymous shared
``mmap``); this process merges the planes (:meth:`RankTally.merge`) and judges the
pass. A rank stays on one worker for every pass and is set to the same epochs in
the same order as the serial count sets it, so its indices are the same: the
merged tally is the serial one, problems and verdicts included. Each worker limits
torch to one thread, as torch's own ``DataLoader`` workers do (a forked child must
not use a thread pool its parent started). Forking needs a POSIX system; where
there is none, or for one worker, the ranks are counted here, one after the other.
Either way the ranks counted so far are reported to the command's progress line
(:mod:`~composer_sampling._proofs.progress`): each worker writes its count into a
shared slot, which this process reads while it waits for the workers' tallies.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from composer_sampling import ResumableDistributedSampler
    >>> from composer_sampling._graph.snapshot import take_snapshot
    >>> loaders = [DataLoader(range(8), sampler=ResumableDistributedSampler(8, 4, r)) for r in range(4)]
    >>> graphs = [take_snapshot(loader) for loader in loaders]
    >>> [tally.counts.at_least_once() for tally in tally_passes(loaders, graphs, [(0, [0]), (1, [1])], 8, 2)]
    [8, 8]
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from functools import partial
from itertools import pairwise
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._proofs._indices import rank_chunks
from composer_sampling._proofs.counting import RankOverlap, plane_bytes
from composer_sampling._proofs.coverage import RankTally
from composer_sampling._proofs.progress import Progress, current_progress
from composer_sampling._validate import valid_int

__all__ = ['MIN_WORKER_SAMPLES', 'available_cores', 'plan_workers', 'tally_passes']

#: Samples a pass must have per worker before the default adds a worker (about a second of counting each).
MIN_WORKER_SAMPLES = 1 << 22

#: One pass to count: its data epoch (named in problems) and the trainer epochs it spans.
Pass = tuple[int, Sequence[int]]


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1.

    Example:
        >>> available_cores() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this system
        return max(1, os.cpu_count() or 1)


def plan_workers(workers: int | None, ranks: int, samples: int) -> int:
    """How many processes count ``ranks`` ranks of ``samples`` indices per pass: ``workers`` when given, else one per
    core available, one for every :data:`MIN_WORKER_SAMPLES` samples at most; never more than the ranks, and one
    where processes cannot be forked.

    Example:
        >>> plan_workers(4, ranks=2, samples=10**9), plan_workers(None, ranks=1024, samples=1000)
        (2, 1)
    """
    if workers is None:
        workers = min(available_cores(), max(1, samples // MIN_WORKER_SAMPLES))
    else:
        workers = valid_int('workers', workers, minimum=1)
    if 'fork' not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(workers, ranks))


def tally_passes(loaders: list[DataLoader], graphs: list[GraphSnapshot], passes: Sequence[Pass], dataset_len: int,
                 workers: int) -> Iterator[RankTally]:
    """Per pass, the tally of every loader's indices over its trainer epochs (``loaders[r]`` is rank r's).

    Read each tally before asking for the next one: the workers reuse their memory.
    ``workers`` processes count (:func:`plan_workers`), or this one when it is 1.
    An exception raised by a rank's sampler is raised here, the lowest rank's first.
    """
    if workers <= 1:
        progress = current_progress()
        for number, (data_epoch, epochs) in enumerate(passes):
            tally = RankTally(RankOverlap(dataset_len))
            _count_run(tally, loaders, graphs, range(len(loaders)), data_epoch, epochs,
                       partial(progress.update, total=len(loaders), text=_progress_text(number, len(passes))))
            yield tally
        return
    yield from _forked_tallies(loaders, graphs, passes, dataset_len, workers)


def _progress_text(number: int, passes: int) -> str:
    """What the progress line says while pass ``number`` (from 0) of ``passes`` is counted.

    Example:
        >>> _progress_text(0, 2).format(done='5,120', total='16,384')
        'counted 5,120 of 16,384 ranks (pass 1 of 2)'
    """
    return 'counted {done} of {total} ranks' + (f' (pass {number + 1} of {passes})' if passes > 1 else '')


def _count_run(tally: RankTally, loaders: list[DataLoader], graphs: list[GraphSnapshot], run: range,
               data_epoch: int, epochs: Sequence[int], counted: Callable[[int], None]) -> None:
    """Count the ranks of ``run`` (consecutive) into ``tally``; ``counted`` is told how many are done after each."""
    chunks = rank_chunks(loaders[run.start:run.stop], epochs, graphs[run.start:run.stop])
    counted(0)
    for done, (rank, rank_chunks_) in enumerate(zip(run, chunks, strict=True), start=1):
        tally.add_rank(rank, rank_chunks_, data_epoch)
        counted(done)


def _runs(ranks: int, workers: int) -> list[range]:
    """``ranks`` cut into ``workers`` runs of consecutive ranks, as even as can be."""
    bounds = [ranks * k // workers for k in range(workers + 1)]
    return [range(lo, hi) for lo, hi in pairwise(bounds)]


def _forked_tallies(loaders: list[DataLoader], graphs: list[GraphSnapshot], passes: Sequence[Pass],
                    dataset_len: int, workers: int) -> Iterator[RankTally]:
    context = multiprocessing.get_context('fork')
    size = max(1, plane_bytes(dataset_len, 3))
    stores = [mmap.mmap(-1, size) for _ in range(workers)]  # anonymous and shared: zeroed, paged in when written
    counted = np.frombuffer(mmap.mmap(-1, 8 * workers), dtype=np.int64)  # the ranks each worker has counted
    runs = _runs(len(loaders), workers)
    connections, processes = [], []
    try:
        for worker, (run, store) in enumerate(zip(runs, stores, strict=True)):
            ours, theirs = context.Pipe()
            process = context.Process(target=_work, args=(theirs, loaders, graphs, run, passes, dataset_len, store,
                                                          counted[worker:worker + 1]),
                                      daemon=True, name=f'plan ranks {run.start}-{run.stop - 1}')
            process.start()
            theirs.close()
            connections.append(ours)
            processes.append(process)
        progress = current_progress()
        for number in range(len(passes)):
            counted.fill(0)  # before the pass is asked for: no worker writes its slot until then
            for connection in connections:
                connection.send(number)
            report = partial(_report, progress, counted, len(loaders), _progress_text(number, len(passes)))
            replies = [_reply(connection, process, progress, report)
                       for connection, process in zip(connections, processes, strict=True)]
            tallies = [_tally(reply, dataset_len, store) for reply, store in zip(replies, stores, strict=True)]
            for tally in tallies[1:]:
                tallies[0].merge(tally)
            yield tallies[0]
    finally:
        for connection in connections:
            with suppress(OSError):  # the worker is gone already
                connection.send(None)
            connection.close()
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()
        # the stores are unmapped when the last array on them goes (the tally yielded last may still be read)


def _report(progress: Progress, counted: np.ndarray, ranks: int, text: str) -> None:
    """Draw the ranks that the workers have counted so far, as their shared slots say."""
    progress.update(int(counted.sum()), ranks, text)


def _reply(connection: Connection, process: Any, progress: Progress, report: Callable[[], None]) -> dict[str, Any]:
    """A worker's tally of one pass; the exception it raised is raised here. While the tally is not there yet,
    ``report`` is called every ``progress.interval`` seconds when the progress line is drawn."""
    if progress.active:
        report()
        while not connection.poll(progress.interval):  # True once the reply is there, or the worker is gone
            report()
    try:
        reply: dict[str, Any] = connection.recv()
    except EOFError:
        process.join(timeout=10)
        raise RuntimeError(f'the plan worker counting {process.name} ended without a result (exit code '
                           f'{process.exitcode}): out of memory? Pass fewer workers (--workers)') from None
    if 'error' in reply:
        error = reply['error']
        if hasattr(error, 'add_note'):  # Python 3.11 and later
            error.add_note(f'raised in the plan worker counting {process.name}:\n{reply["traceback"]}')
        raise error
    return reply


def _tally(reply: dict[str, Any], dataset_len: int, store: mmap.mmap) -> RankTally:
    """A worker's tally read from its reply and its planes."""
    counts = RankOverlap(dataset_len, np.frombuffer(store, dtype=np.uint8))
    if reply['within']:
        counts.note_within()
    return RankTally(counts, reply['trained'], reply['ranks'], reply['idle'], reply['problem'])


def _work(connection: Connection, loaders: list[DataLoader], graphs: list[GraphSnapshot], run: range,
          passes: Sequence[Pass], dataset_len: int, store: mmap.mmap, counted: np.ndarray) -> None:
    """A worker: count ``run``'s ranks of each pass asked for into ``store``, reply with the rest of the tally;
    ``counted``, one shared slot, holds the ranks of the pass counted so far."""
    import torch

    torch.set_num_threads(1)
    planes = np.frombuffer(store, dtype=np.uint8)
    first = True
    while (number := connection.recv()) is not None:
        if not first:
            planes.fill(0)
        first = False
        try:
            tally = RankTally(RankOverlap(dataset_len, planes))
            data_epoch, epochs = passes[number]
            _count_run(tally, loaders, graphs, run, data_epoch, epochs, counted.fill)
            reply: dict[str, Any] = {'trained': tally.trained, 'ranks': tally.ranks, 'idle': tally.idle,
                                     'problem': tally.problem, 'within': tally.counts.within is not None}
        except BaseException as error:  # the parent raises it, as the serial count would
            reply = {'error': _picklable(error), 'traceback': traceback.format_exc()}
        connection.send(reply)
        if 'error' in reply:
            return
    connection.close()


def _picklable(error: BaseException) -> BaseException:
    """``error`` itself when it pickles (most do), else a RuntimeError that carries its traceback."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # whatever fails to pickle is sent as text
        return RuntimeError(f'a plan worker raised {type(error).__name__}:\n{traceback.format_exc()}')
    return error
