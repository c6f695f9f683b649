"""The README stays short enough to finish, and no link, page or Python file named in it or in docs/ is dead.

PyPI renders the README as the wheel's page, where a relative link is broken, so the
README names the pages of docs/ as paths instead of linking them: the repository and the
sdist hold them (MANIFEST.in), and the wheel installs them, which ``composer-sampling docs``
prints. The pages of docs/ link each other relatively. An absolute link into this
repository (a URL that ``[project.urls]`` of pyproject.toml names, followed by
``/blob/REF/`` or ``/tree/REF/``) must name a file that exists here.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import sys
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
    files = _python_files()
    named = set(re.findall(r'`([\w./-]+\.py)`', page.read_text()))
    missing = sorted(name for name in named if not any(f == name or f.endswith('/' + name) for f in files))
    assert not missing, f'{page.relative_to(ROOT)} names Python files that do not exist: {missing}'


@functools.cache
def _python_files() -> frozenset[str]:
    """The repository's Python files, relative to its root; hidden folders such as ``.git`` and the virtual
    environments ``.venv*`` are not walked (the environments hold thousands, some of them named as ours are)."""
    found = set()
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if not name.startswith('.')]
        found.update(Path(folder, name).relative_to(ROOT).as_posix() for name in names if name.endswith('.py'))
    return frozenset(found)


def _named_in_the_readme() -> set[str]:
    """The files of the repository that the README names as paths: ``docs/NAME.md`` and ``BENCHMARKS.md``."""
    return set(re.findall(r'`((?:docs/)?[\w.-]+\.md)`', (ROOT / 'README.md').read_text()))


def test_the_readme_has_no_relative_link() -> None:
    assert not _relative_links(ROOT / 'README.md'), 'PyPI shows the README with relative links broken: name the path'


def test_every_page_of_docs_is_named_in_the_readme_and_every_page_named_exists() -> None:
    named = _named_in_the_readme()
    orphans = [page.name for page in PAGES[1:] if page.relative_to(ROOT).as_posix() not in named]
    assert not orphans, f'docs pages the README does not name: {orphans}'
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert not missing, f'README.md names pages that do not exist: {missing}'


def test_the_link_pattern_finds_links() -> None:
    page = '[the order](docs/samplers.md#order) and [Composer](https://docs.mosaicml.com)\n```\nx[0](1)\n```'
    assert LINK.findall(_without_code(page)) == ['docs/samplers.md#order', 'https://docs.mosaicml.com']


def _repository_urls() -> list[str]:
    """The URLs ``[project.urls]`` of pyproject.toml names, without a trailing slash."""
    if sys.version_info < (3, 11):
        pytest.skip('tomllib arrived in Python 3.11')
    import tomllib

    urls = tomllib.loads((ROOT / 'pyproject.toml').read_text()).get('project', {}).get('urls', {})
    return [url.rstrip('/') for url in urls.values()]


def _path_in_repository(target: str, repositories: list[str]) -> str | None:
    """The file an absolute link into one of ``repositories`` names, relative to the root, or None for another link.

    Example: ``https://github.com/o/r/blob/main/docs/x.md#a`` names ``docs/x.md`` when ``https://github.com/o/r`` is
    a repository.
    """
    for repository in repositories:
        match = re.match(re.escape(repository) + r'/(?:blob|tree)/[^/]+/([^#?]*)', target)
        if match:
            return match.group(1)
    return None


def test_a_link_into_the_repository_maps_to_its_file() -> None:
    repositories = ['https://github.com/owner/repo']
    assert _path_in_repository('https://github.com/owner/repo/blob/main/docs/recipes.md#fields', repositories) == \
        'docs/recipes.md'
    assert _path_in_repository('https://github.com/owner/other/blob/main/docs/recipes.md', repositories) is None


@pytest.mark.parametrize('page', PAGES, ids=lambda page: page.name)
def test_every_absolute_link_into_this_repository_names_a_file_that_exists(page: Path) -> None:
    repositories = _repository_urls()
    named = [_path_in_repository(target, repositories) for target in LINK.findall(_without_code(page.read_text()))]
    dead = [path for path in named if path is not None and not (ROOT / path).exists()]
    assert not dead, f'{page.relative_to(ROOT)} links into the repository to missing files: {dead}'


def _shipped_in_the_sdist(path: str) -> bool:
    """Whether a line of MANIFEST.in (``include`` or ``recursive-include``) takes ``path`` into the sdist."""
    for line in (ROOT / 'MANIFEST.in').read_text().splitlines():
        words = line.split()
        if words[:1] == ['include'] and any(fnmatch.fnmatch(path, pattern) for pattern in words[1:]):
            return True
        if words[:1] == ['recursive-include'] and len(words) > 2 and path.startswith(words[1].rstrip('/') + '/') \
                and any(fnmatch.fnmatch(Path(path).name, pattern) for pattern in words[2:]):
            return True
    return False


def test_the_sdist_carries_every_page_the_readme_names() -> None:
    assert (ROOT / 'MANIFEST.in').is_file(), 'no MANIFEST.in: the sdist would lack the docs the README names'
    missing = sorted(path for path in _named_in_the_readme() if not _shipped_in_the_sdist(path))
    assert not missing, f'README.md names files that MANIFEST.in leaves out of the sdist: {missing}'
