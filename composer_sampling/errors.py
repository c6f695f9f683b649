"""The error composer-sampling raises when it refuses a data order, the same under every trainer.

A refusal comes before training, or before the batch it would spoil, and its message
says what would work. :class:`DataOrderError` is a ``ValueError``, so code that
caught the ``ValueError`` of earlier releases still catches it.

Example:
    >>> from composer_sampling import DataOrderError
    >>> issubclass(DataOrderError, ValueError)
    True
"""

from __future__ import annotations

__all__ = ['DataOrderError']


class DataOrderError(ValueError):
    """A train loader, checkpoint or resume refused because the data order would not be exact: samples repeated or
    skipped, another order, other data. The message names what was found and what would work."""
