"""The one error a recipe raises: :class:`RecipeError`, whose message names the field and what would be valid.

Only the recipe layer speaks in YAML field names; the library's own errors name
Python arguments, and the recipe layer turns them into field names.
"""

from __future__ import annotations

__all__ = ['RecipeError']


class RecipeError(ValueError):
    """A recipe that cannot run: the message names the field and what would be valid."""
