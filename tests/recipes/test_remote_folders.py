"""A remote save or ledger folder is looked at before training, as a local one is; Composer's ``.symlink`` pointers
are followed a bounded number of times.

The S3 tests run against the SeaweedFS server of ``s3_bucket`` (real S3 over loopback); the one of a store that
does not answer points ``S3_ENDPOINT_URL`` at a loopback port nothing listens on.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from composer_sampling._stores.pointers import MAX_POINTERS, PointerError, follow_pointers
from composer_sampling.recipes.build_training import build_run
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import main as train_main

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')

# ---------------------------------------------------------------------------------------------------------------
# Pointers, on generated stores: a dict of object names, pointers holding a name


_OBJECTS = ['x', 'y']
_POINTERS = ['a.symlink', 'b.symlink', 'x.symlink', 'c.symlink', 'p0.symlink', 'p3.symlink']
_TEXTS = ['x', 'y', 'z', 'a', 'b', 'c', 'a.symlink', 'b.symlink', 'x.symlink', 'z.symlink', '', 'p0', 'p2.symlink']
_FAILED = object()  # Composer's get_file raises: a missing object, an empty name, or its recursion limit


def _composer_get_file(name: str, store: dict[str, str], depth: int = 0) -> tuple[object, int]:
    """What Composer 0.32.1's ``get_file`` reaches from ``name`` in ``store`` (its code, steps and all), and the
    pointers it read: it reads a ``.symlink`` name's text and calls itself, and tries a missing name again with
    ``.symlink`` added. Python's recursion limit is modelled as 200 calls."""
    if depth > 200 or not name:
        return _FAILED, 0
    if name.endswith('.symlink'):
        if name not in store:
            return _FAILED, 0
        found, reads = _composer_get_file(store[name], store, depth + 1)
        return found, reads + 1
    if name in store:
        return name, 0
    return _composer_get_file(name + '.symlink', store, depth + 1)


@st.composite
def _stores(draw: st.DrawFn) -> dict[str, str]:
    """Pointers naming one another at random, over a chain ``p0 -> p1 -> ...`` of a drawn length ending anywhere."""
    length = draw(st.integers(0, MAX_POINTERS + 1))
    store = {f'p{k}.symlink': f'p{k + 1}' for k in range(length)}
    store[f'p{length}.symlink'] = draw(st.sampled_from(_TEXTS))
    store.update(draw(st.dictionaries(st.sampled_from(_POINTERS), st.sampled_from(_TEXTS), max_size=4)))
    store.update({name: 'data' for name in draw(st.sets(st.sampled_from(_OBJECTS)))})
    return store


@given(store=_stores(), start=st.sampled_from(['p0', 'p0.symlink', 'a', 'b.symlink', 'x']))
def test_pointers_lead_where_composer_goes_or_are_refused_naming_one(store: dict[str, str], start: str) -> None:
    """Where Composer's unbounded ``get_file`` reaches an object through at most MAX_POINTERS pointers, so do we;
    where it fails (recursion, an empty or missing name), we refuse naming a pointer we read, or hand back the name
    asked for when nothing of that name is there; we never read more than MAX_POINTERS pointers, nor a missing one."""
    reads: list[str] = []

    def read(name: str) -> str:
        assert name in store, f'read {name}, which is not in the store'
        reads.append(name)
        return store[name]

    reached, composer_reads = _composer_get_file(start, store)
    try:
        found = follow_pointers(start, store.__contains__, read)
    except PointerError as error:
        assert reached is _FAILED or composer_reads > MAX_POINTERS, (reached, str(error))
        assert any(f'pointer {name} ' in str(error) or str(error).startswith(name) for name in reads), str(error)
    else:
        if reached is _FAILED:
            assert found == start and not reads and start not in store and f'{start}.symlink' not in store
        else:
            assert found == reached and composer_reads <= MAX_POINTERS
    assert len(reads) <= MAX_POINTERS


# ---------------------------------------------------------------------------------------------------------------
# Against the S3 server


def _put(uri: str, data: bytes) -> None:
    """Put ``data`` at ``uri`` (s3://bucket/key) with the client of Composer's own object store for it."""
    from composer.utils import maybe_create_object_store_from_uri, parse_uri

    store = maybe_create_object_store_from_uri(uri)
    assert store is not None
    store.client.put_object(Bucket=store.bucket, Key=parse_uri(uri)[2], Body=data)


def _listing(bucket: str) -> list[str]:
    from composer.utils import maybe_create_object_store_from_uri

    store = maybe_create_object_store_from_uri(f'{bucket}/')
    assert store is not None
    return sorted(store.list_objects(''))


def _pointer_case(case: str, bucket: str) -> str:
    """Write the pointers of ``case`` under ``run/`` of ``bucket``; return what the refusal must say."""
    latest = f'{bucket}/run/latest-rank0.pt.symlink'
    texts = {
        'names itself': ({'latest-rank0.pt.symlink': 'run/latest-rank0.pt.symlink'}, f'the pointer {latest} names '
                         'itself, so it names no checkpoint'),
        'names itself without its suffix': ({'latest-rank0.pt.symlink': 'run/latest-rank0.pt'},
                                            f'the pointer {latest} names itself'),
        'empty': ({'latest-rank0.pt.symlink': ''}, f'the pointer {latest} is empty: it names no object'),
        'loop': ({'latest-rank0.pt.symlink': 'run/other.pt.symlink', 'other.pt.symlink': 'run/latest-rank0.pt'},
                 f'the pointer {bucket}/run/other.pt.symlink names {latest}, a pointer already followed: the pointers '
                 f'form the loop {latest} -> {bucket}/run/other.pt.symlink -> {latest}'),
        'missing': ({'latest-rank0.pt.symlink': 'run/ep9-ba90-rank0.pt'}, f'the pointer {latest} names '
                    'run/ep9-ba90-rank0.pt, which is not in the object store, nor is run/ep9-ba90-rank0.pt.symlink'),
        'chain': ({'latest-rank0.pt.symlink': 'run/p0', **{f'p{k}.symlink': f'run/p{k + 1}' for k in range(8)}},
                  f'{latest} starts a chain of more than {MAX_POINTERS} pointers'),
        'too large': ({'latest-rank0.pt.symlink': 'run/' + 'x' * 5000}, f'the pointer {latest} holds 5004 bytes, '
                      'more than the 4096 a pointer holds'),
    }
    pointers, message = texts[case]
    for name, text in pointers.items():
        _put(f'{bucket}/run/{name}', text.encode())
    return message


@pytest.mark.s3
@pytest.mark.parametrize('case', ['names itself', 'names itself without its suffix', 'empty', 'loop', 'missing',
                                  'chain', 'too large'])
def test_a_broken_pointer_is_named_before_training(case: str, s3_bucket: str, capsys) -> None:
    """A load_path whose latest pointer leads nowhere stops at once, exit 2, naming the pointer and what is wrong.
    Composer's get_file recursed for 20 s into "maximum recursion depth exceeded" on a pointer that names itself,
    and sent an empty one to S3 as an empty key (ParamValidationError)."""
    message = _pointer_case(case, s3_bucket)
    started = time.monotonic()
    assert train_main([DIGITS, f'load_path={s3_bucket}/run/latest-rank0.pt']) == 2
    assert time.monotonic() - started < 10
    captured = capsys.readouterr()
    assert captured.err.startswith(f'error: load_path: {message}'), captured.err
    assert len(captured.err.splitlines()) == 1 and 'run summary' not in captured.out


@pytest.mark.s3
def test_autoresume_names_a_pointer_that_names_itself(s3_bucket: str, capsys) -> None:
    message = _pointer_case('names itself', s3_bucket)
    assert train_main([DIGITS, f'save_folder={s3_bucket}/run', 'run_name=r', 'autoresume=true']) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: save_folder (autoresume): {message}') and len(err.splitlines()) == 1, err


@pytest.mark.s3
def test_a_fresh_run_into_a_prefix_with_an_earlier_runs_checkpoints_is_refused_before_training(
        s3_bucket: str, capsys) -> None:
    """As a local save folder is: exit 2 before the summary, nothing uploaded (Composer trained to the end, failed
    with FileExistsError, and had uploaded its ledger into the earlier run's ledger/); save_overwrite lets it run."""
    for name in ('run/ep0-ba1-rank0.pt', 'run/latest-rank0.pt.symlink', 'run/ledger/a1-rank0.bin'):
        _put(f'{s3_bucket}/{name}', b'earlier run')
    before = _listing(s3_bucket)
    command = [DIGITS, f'save_folder={s3_bucket}/run', 'run_name=r', 'callbacks.sample_ledger={}', 'max_duration=1ba']
    assert train_main(command) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f'error: save_folder {s3_bucket}/run holds the checkpoints of an earlier run '
                                   '(ep0-ba1-rank0.pt); Composer would refuse to upload over them, after training. '
                                   'Choose another save_folder, set save_overwrite: true to replace them, or '
                                   'load_path to resume'), captured.err
    assert 'run summary' not in captured.out and _listing(s3_bucket) == before
    build_run(resolve(load_recipe(DIGITS, [*command[1:], 'save_overwrite=true'])))  # refused no more


@pytest.mark.s3
def test_a_fresh_runs_ledger_folder_holding_an_earlier_runs_ledger_is_refused(s3_bucket: str, tmp_path: Path,
                                                                              capsys) -> None:
    _put(f'{s3_bucket}/ledgers/a1-rank0.bin', b'earlier run')
    command = [DIGITS, f'save_folder={tmp_path / "run"}', f'callbacks.sample_ledger.folder={s3_bucket}/ledgers']
    assert train_main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: callbacks.sample_ledger.folder {s3_bucket}/ledgers holds the ledger files of an '
                          'earlier run (a1-rank0.bin); this run would upload its own among them'), err


@pytest.mark.s3
def test_a_resume_refuses_a_remote_save_folder_with_later_checkpoints(s3_bucket: str, tmp_path: Path) -> None:
    """Composer would train up to them and fail to upload over them; the latest of them is offered instead."""
    resumed = tmp_path / 'ep0-ba2-rank0.pt'
    torch.save({'state': {'model': {}}, 'rng': []}, resumed)
    for name in ('ep0-ba2-rank0.pt', 'ep1-ba25-rank0.pt', 'ep1-ba25-rank1.pt', 'ep0-ba24-rank0.pt'):
        _put(f'{s3_bucket}/run/{name}', b'earlier run')
    recipe = load_recipe(DIGITS, [f'save_folder={s3_bucket}/run', f'load_path={resumed}'])
    with pytest.raises(RecipeError, match=rf'^save_folder {s3_bucket}/run holds ep0-ba24-rank0.pt, ep1-ba25-rank0.pt, '
                                          r'checkpoints later than the one load_path resumes \(ep0-ba2-rank0.pt\), '
                                          rf'.* Resume from the latest of them \(load_path={s3_bucket}/run/'
                                          r'ep1-ba25-rank0.pt\)'):
        build_run(resolve(recipe))


def test_a_remote_ledger_folder_that_does_not_answer_is_refused_before_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Beside a local save folder: exit 2 naming the field, the URI and the reason, before the summary (it printed
    the summary, trained, and failed at fit start with exit 1)."""
    with socket.socket() as unused:
        unused.bind(('127.0.0.1', 0))
        port = unused.getsockname()[1]  # closed again: nothing listens there
    for name, value in {'S3_ENDPOINT_URL': f'http://127.0.0.1:{port}', 'AWS_ACCESS_KEY_ID': 'k',
                        'AWS_SECRET_ACCESS_KEY': 's', 'AWS_DEFAULT_REGION': 'us-east-1', 'AWS_MAX_ATTEMPTS': '1',
                        'AWS_CONFIG_FILE': str(tmp_path / 'absent'), 'AWS_SHARED_CREDENTIALS_FILE': str(tmp_path / 'x'),
                        'AWS_EC2_METADATA_DISABLED': 'true'}.items():
        monkeypatch.setenv(name, value)
    command = [DIGITS, f'save_folder={tmp_path / "run"}', 'callbacks.sample_ledger.folder=s3://bucket/ledger']
    assert train_main(command) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith('error: callbacks.sample_ledger.folder: s3://bucket/ledger: the object store does '
                                   'not answer'), captured.err
    assert f'S3_ENDPOINT_URL=http://127.0.0.1:{port}' in captured.err and len(captured.err.splitlines()) == 1
    assert 'run summary' not in captured.out and not (tmp_path / 'run').exists()
