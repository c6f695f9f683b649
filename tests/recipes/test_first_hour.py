"""The first hour of a new user: the bundled recipes listed, copied, planned and audited as the README says."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from composer_sampling.recipes.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_recipe_list_prints_whole_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['recipes']) == 0
    out = capsys.readouterr().out
    entries = re.split(r'\n(?=\S)', out.split('\n\n')[0])  # a description may wrap onto indented lines
    descriptions = {entry.split()[0]: ' '.join(entry.split()[1:]) for entry in entries}
    assert set(descriptions) == {path.stem for path in (ROOT / 'yamls').glob('*.yaml')}
    for name, description in descriptions.items():
        assert description.endswith('.'), f'{name}: {description!r} is cut mid-sentence'
    assert descriptions['mixture'] == ('Digits cut into 3 sources (50%, 30%, 20% of the train split); every global '
                                       'step of 128 samples comes from one source, with 2 gradient-accumulation '
                                       'steps.')
    assert max(len(line) for line in out.splitlines()) <= 100


def test_the_docs_command_lists_every_page_and_prints_one(capsys: pytest.CaptureFixture[str]) -> None:
    """The pages the README names are readable from an installed package (the wheel's copy: tests/test_wheel.py)."""
    assert main(['docs']) == 0
    listed = {line.split()[0]: line.split(None, 1)[1] for line in capsys.readouterr().out.split('\n\n')[0].splitlines()}
    assert set(listed) == {path.stem for path in (ROOT / 'docs').glob('*.md')}
    assert listed['resume'] == 'Resume: as if the run never stopped'
    assert main(['docs', 'resume.md']) == 0
    assert capsys.readouterr().out == (ROOT / 'docs' / 'resume.md').read_text()
    assert main(['docs', 'tutorial']) == 2
    assert capsys.readouterr().err.startswith("error: no page 'tutorial'; choose one of: data-order, layout, ")


def test_a_copied_recipe_names_its_copy_in_its_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['recipes', 'digits', '--to', str(tmp_path)]) == 0
    copied = (tmp_path / 'digits.yaml').read_text()
    assert 'yamls/digits.yaml' not in copied
    assert f'#   composer-sampling train {tmp_path / "digits.yaml"}' in copied
    bundled = (ROOT / 'yamls' / 'digits.yaml').read_text()
    assert copied.splitlines()[3:] == bundled.splitlines()[3:]  # only the header's commands change


def test_audit_of_a_folder_without_a_ledger_names_the_missing_callback(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['audit', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f'nothing recorded: no ledger file in {tmp_path} or {tmp_path / "ledger"}' in err
    assert 'callbacks: {sample_ledger: {}}' in err and 'SampleLedger()' in err


@pytest.mark.parametrize(('overrides', 'expected'), [
    ([], "checked 2 trainer epochs (--epochs 2) of the 4 that the recipe trains (max_duration: 4ep); --epochs 4 "
         'checks them all'),
    (['--epochs', '4'], 'checked 4 trainer epochs (--epochs 4), every epoch that the recipe trains '
                        '(max_duration: 4ep)'),
    (['--epochs', '1', 'max_duration=30ba'], 'checked 1 trainer epoch (--epochs 1); the recipe trains for '
                                             'max_duration: 30ba; --epochs N checks N epochs'),
    (['--epochs', '1', 'max_duration=9007199254740992ep'],  # 2**53, the largest Composer reads exactly
     'checked 1 trainer epoch (--epochs 1) of the 9007199254740992 that the recipe trains (max_duration: '
     '9007199254740992ep); --epochs 9007199254740992 checks them all'),
])
def test_plan_says_how_many_epochs_it_checked(overrides: list[str], expected: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    small = ['train_loader.dataset={name: synthetic, size: 64}', 'global_train_batch_size=16']
    assert main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), *overrides, *small]) == 0
    assert expected in capsys.readouterr().out


@pytest.mark.parametrize('command', ['plan', 'train'])
def test_without_scikit_learn_a_bundled_recipe_names_the_demo_extra(command: str, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    for name in ('sklearn', 'sklearn.datasets'):  # either import raises ImportError, as when not installed, even
        monkeypatch.setitem(sys.modules, name, None)  # after an earlier test of this process imported them
    assert main([command, str(ROOT / 'yamls' / 'digits.yaml')]) == 2
    err = capsys.readouterr().err
    assert 'the digits dataset needs scikit-learn: pip install "composer-sampling[demo]"' in err
    assert 'Traceback' not in err


def test_the_recipe_docs_say_the_bundled_recipes_need_scikit_learn() -> None:
    text = (ROOT / 'docs' / 'recipes.md').read_text()
    bundled = text.split('## The bundled recipes')[1].split('\n## ')[0]
    assert "pip install 'composer-sampling[demo]'" in bundled and 'need scikit-learn' in bundled
    assert 'no download' not in bundled


def test_the_readme_flow_on_a_copied_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """recipes digits --to DIR, plan, train, audit, in a fresh folder, as a new user runs them; the run is cut to
    3 batches, and the ledger is added by overrides, as the audit's message says."""
    monkeypatch.chdir(tmp_path)
    assert main(['recipes', 'digits', '--to', '.']) == 0
    assert capsys.readouterr().out == 'wrote digits.yaml; train it with: composer-sampling train digits.yaml\n'
    assert '#   composer-sampling train digits.yaml' in Path('digits.yaml').read_text()

    assert main(['plan', 'digits.yaml', '--epochs', '1']) == 0
    out = capsys.readouterr().out
    assert 'every guarantee holds' in out
    assert ('checked 1 trainer epoch (--epochs 1) of the 4 that the recipe trains (max_duration: 4ep); --epochs 4 '
            'checks them all') in out

    assert main(['audit', 'run']) == 2  # nothing trained yet: the message says what a ledger needs
    assert 'error: run is not a folder' in capsys.readouterr().err
    Path('run').mkdir()
    assert main(['audit', 'run']) == 2
    assert 'callbacks: {sample_ledger: {}}' in capsys.readouterr().err

    assert main(['train', 'digits.yaml', 'max_duration=3ba', 'eval_interval=3ba', 'save_folder=run',
                 'callbacks.sample_ledger={}']) == 0
    capsys.readouterr()
    assert sorted(path.name for path in Path('run', 'ledger').iterdir())[0].endswith('-rank0.bin')

    assert main(['audit', 'run']) == 0
    out = capsys.readouterr().out
    assert re.search(r'^lineage counted: [0-9a-f]{32} \(the only lineage in the folder\)$', out, flags=re.MULTILINE)
    assert re.search(r'^attempts counted, from the fresh start: [0-9a-f]{16}$', out, flags=re.MULTILINE)
    assert re.search(r'^\|\s+0 \|\s+192 \|\s+192 \|\s+0 \|\s+1246 \| partial \(run ended at batch 3\)', out,
                     flags=re.MULTILINE), out
    assert 'dataset length 1438' in out
