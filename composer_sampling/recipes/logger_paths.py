"""The files and folders that Composer's loggers write on this machine, filled as Composer fills them and checked
like the save folder, before anything trains.

Composer's ``FileLogger`` always truncates its file, so :func:`check_logger_paths` refuses an existing file (a
checkpoint, on a resume) unless ``save_overwrite``, and checks that every path a logger writes can be created.

Example:
    >>> logger_path({'filename': 'runs/{run_name}/log.txt'}, 'filename', None)
    'runs/{run_name}/log.txt'
    >>> logger_path({'init_kwargs': {'project': 'p'}}, 'init_kwargs.dir', None) is None
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from composer_sampling._checkpoint.save_folder import ZIP_MAGIC
from composer_sampling.recipes.composer_names import LOGGER_PATHS
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import check_writable_folder, fill_rank_zero
from composer_sampling.recipes.resolve import RunSpec

__all__ = ['check_logger_paths', 'logger_path']


def logger_path(arguments: Any, argument: str, default: str | None) -> str | None:
    """The path in ``arguments`` at ``argument`` (a dotted name reaches into a mapping), else ``default``."""
    value: Any = arguments
    for name in argument.split('.'):
        if not isinstance(value, dict) or name not in value:
            return default
        value = value[name]
    return None if value is None else str(value)


def check_logger_paths(spec: RunSpec) -> None:
    """Refuse a logger path that this process cannot write, or a file logger's file that exists (unless
    ``save_overwrite``): Composer would cut it to nothing."""
    for part in spec.loggers:
        known = LOGGER_PATHS.get(part.target.rpartition(':')[2])
        if known is None or (template := logger_path(dict(part.arguments), known[0], known[1])) is None:
            continue
        argument, _, kind = known
        field = f'{part.arguments_field}.{argument}'
        if kind == 'store':
            if '://' in template and not template.startswith('file:'):
                continue  # a tracking server: nothing on this machine
            template = template.removeprefix('file://').removeprefix('file:')
        path = fill_rank_zero(field, template, spec.run_name)
        if kind == 'run folder' and spec.run_name is not None:
            path = str(Path(path) / spec.run_name)
        check_writable_folder(field, template, str(Path(path).parent) if kind == 'log file' else path)
        if kind != 'log file' or '{run_name}' in path:
            continue  # only a file logger's file may exist; one under a run name Composer will choose is new
        existing, shown = Path(path), f'{template!r}' + (f' ({path} for this run)' if path != template else '')
        if existing.is_dir():
            raise RecipeError(f'{field} {shown} is a folder; the file logger writes a file: choose another filename')
        if not existing.exists() or spec.recipe.save_overwrite:
            continue
        checkpoint = _is_checkpoint(existing)
        if spec.recipe.load_path is None or checkpoint:
            what = 'a checkpoint' if checkpoint else "an earlier run's file"
            raise RecipeError(f'{field} {shown} exists ({existing.stat().st_size} bytes, {what}): Composer\'s '
                              "FileLogger opens its file with 'w+', whatever its overwrite says, and would cut it to "
                              'nothing. Choose another filename, or set save_overwrite: true to replace it')


def _is_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a checkpoint by its name or its first bytes (a zip archive, as ``torch.save`` writes), and
    so never a log that a resume of the same run may start again."""
    if path.suffix == '.pt' or path.name.endswith('.pt.symlink'):
        return True
    with open(path, 'rb') as file:
        return file.read(len(ZIP_MAGIC)) == ZIP_MAGIC
