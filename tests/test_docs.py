"""The README stays short enough to finish, and no link or Python file named in it or in docs/ is dead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
README_WORD_LIMIT = 1500


def _without_code(text: str) -> str:
    """Drop fenced code blocks, whose brackets are Python, not links."""
    return re.sub(r'```.*?```', '', text, flags=re.DOTALL)


def _relative_links(page: Path) -> list[str]:
    return [target for target in LINK.findall(_without_code(page.read_text()))
            if not re.match(r'[a-z]+:', target) and not target.startswith('#')]


def test_the_readme_is_under_the_word_limit() -> None:
    words = len(ROOT.joinpath('README.md').read_text().split())
    assert words < README_WORD_LIMIT, f'README.md has {words} words; move reference material to docs/'


@pytest.mark.parametrize('page', PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page: Path) -> None:
    dead = [target for target in _relative_links(page)
            if not (page.parent / target.split('#', 1)[0]).exists()]
    assert not dead, f'{page.relative_to(ROOT)} links to missing files: {dead}'


@pytest.mark.parametrize('page', PAGES, ids=lambda page: page.name)
def test_every_python_file_named_exists(page: Path) -> None:
    files = {path.relative_to(ROOT).as_posix() for path in ROOT.rglob('*.py') if '.venv' not in path.parts}
    named = set(re.findall(r'`([\w./-]+\.py)`', page.read_text()))
    missing = sorted(name for name in named if not any(f == name or f.endswith('/' + name) for f in files))
    assert not missing, f'{page.relative_to(ROOT)} names Python files that do not exist: {missing}'


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    linked = {(ROOT / target.split('#', 1)[0]).resolve() for target in _relative_links(ROOT / 'README.md')}
    orphans = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not orphans, f'docs pages no README link reaches: {orphans}'


def test_the_link_pattern_finds_links() -> None:
    assert _relative_links(ROOT / 'README.md'), 'no relative link found in README.md: the pattern is broken'
