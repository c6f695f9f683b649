"""What a model builder may return, made into the ``ComposerModel`` the Trainer needs.

A builder returns a ``ComposerModel`` (used as it is) or a plain ``torch.nn.Module``
with a ``num_classes`` attribute, which is wrapped as Composer users wrap one:
in a ``ComposerClassifier`` (cross-entropy loss, accuracy metrics). Composer's
classifier unpacks ``inputs, targets = batch``; ours also takes
``(inputs, targets, indices)``, so a collate function can carry the sample
indices for ``SampleLedger(index_key=2)`` past the model, which never sees them.

Example:
    >>> import torch
    >>> module = torch.nn.Linear(4, 3)
    >>> module.num_classes = 3
    >>> model = as_composer_model(module, 'my_pkg:build')
    >>> model((torch.zeros(2, 4), torch.tensor([0, 1]), torch.tensor([7, 8]))).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

from typing import Any

import torch
from composer.models import ComposerClassifier, ComposerModel

from composer_sampling._validate import is_integer
from composer_sampling.recipes.errors import RecipeError

__all__ = ['IndexedClassifier', 'as_composer_model']


class IndexedClassifier(ComposerClassifier):
    """``ComposerClassifier`` over batches ``(inputs, targets)`` or ``(inputs, targets, indices)``."""

    def forward(self, batch: Any) -> torch.Tensor:
        return self.module(batch[0])

    def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self._loss_fn(outputs, batch[1], *args, **kwargs)

    def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
        metric.update(outputs, batch[1])


def as_composer_model(built: Any, label: str) -> ComposerModel:
    """``built`` if a ``ComposerModel``; a plain module with ``num_classes`` wrapped in :class:`IndexedClassifier`."""
    if isinstance(built, ComposerModel):
        return built
    if isinstance(built, torch.nn.Module):
        classes = getattr(built, 'num_classes', None)
        if not is_integer(classes) or classes < 1:
            raise RecipeError(f'model: {label} returned a plain {type(built).__name__} without an integer '
                              'num_classes attribute; set module.num_classes (it is wrapped in a ComposerClassifier, '
                              'which needs it for its metrics) or return a composer.models.ComposerModel')
        return IndexedClassifier(built, num_classes=classes)
    raise RecipeError(f'model: {label} returned a {type(built).__name__}; return a composer.models.ComposerModel or '
                      'a torch.nn.Module with a num_classes attribute')
