"""The one error a recipe raises: :class:`RecipeError`, whose message names the field and what would be valid.

:class:`RunComplete` is no error: ``train`` says the run has nothing left to train and exits 0.
"""

from __future__ import annotations

__all__ = ['RecipeError', 'RunComplete']


class RecipeError(ValueError):
    """A recipe that cannot run: the message names the field and what would be valid."""


class RunComplete(Exception):  # noqa: N818 - no error: the run has nothing left to train
    """An ``autoresume`` run whose latest checkpoint has trained all of ``max_duration``: the message says so."""
