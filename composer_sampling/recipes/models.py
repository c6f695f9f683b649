"""What a model builder may return, made into the ``ComposerModel`` the Trainer needs; and what it reports held out.

A plain ``torch.nn.Module`` with ``num_classes`` is wrapped in a ``ComposerClassifier`` that also takes
``(inputs, targets, indices)`` batches, so that ``SampleLedger(index_key=2)`` can read the indices.

Example:
    >>> import torch
    >>> module = torch.nn.Linear(4, 3)
    >>> module.num_classes = 3
    >>> model = as_composer_model(module, 'my_pkg:build')
    >>> model((torch.zeros(2, 4), torch.tensor([0, 1]), torch.tensor([7, 8]))).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from composer.models import ComposerClassifier, ComposerModel

from composer_sampling._validate import is_integer
from composer_sampling.recipes.builders import built
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import RunSpec

if TYPE_CHECKING:
    from composer import Trainer

    from composer_sampling.recipes.checkpoints import CheckedCheckpoint

__all__ = ['IndexedClassifier', 'as_composer_model', 'build_model', 'build_optimizer', 'check_model_shapes',
           'held_out_metrics']


class IndexedClassifier(ComposerClassifier):
    """``ComposerClassifier`` over batches ``(inputs, targets)`` or ``(inputs, targets, indices)``."""

    def forward(self, batch: Any) -> torch.Tensor:
        return self.module(batch[0])

    def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self._loss_fn(outputs, batch[1], *args, **kwargs)

    def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
        metric.update(outputs, batch[1])


def build_model(spec: RunSpec, checked: CheckedCheckpoint | None = None) -> ComposerModel:
    """The model the recipe names, as a ``ComposerModel``, checked against the shapes of ``checked``."""
    part = spec.parts['model']
    model = as_composer_model(built(part), part.label)
    if checked is not None:
        check_model_shapes(checked, model, part.label)
    return model


def build_optimizer(spec: RunSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer builder gets ``params`` (the model's parameters) and its own arguments."""
    return built(spec.parts['optimizer'], lambda made: isinstance(made, torch.optim.Optimizer),
                 'a torch.optim.Optimizer', {'params': model.parameters()})


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


def check_model_shapes(checked: CheckedCheckpoint, model: torch.nn.Module, label: str) -> None:
    """The checkpoint at ``load_path`` holds the model's tensors, each of the model's shape."""
    if not checked.model_shapes:
        return  # trusted unchecked, or a checkpoint without a model
    own = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    for name, shape in checked.model_shapes.items():
        if name in own and own[name] != shape:
            raise RecipeError(f'{checked.field}: the checkpoint {checked.path} holds {name} of shape {list(shape)}, '
                              f'the model ({label}) has {name} of shape {list(own[name])}: it was written by a model '
                              'of another shape; load one of this model, or set the model options it was trained with')
    extra, missing = sorted(set(checked.model_shapes) - set(own)), sorted(set(own) - set(checked.model_shapes))
    if extra or missing:
        detail = f'holds {extra[0]}, which the model lacks' if extra else f'lacks the model\'s {missing[0]}'
        raise RecipeError(f'{checked.field}: the checkpoint {checked.path} {detail} (model: {label}): it was written '
                          'by another model; load one of this model, or build the model it was trained with')


def held_out_metrics(trainer: Trainer) -> dict[str, float]:
    """Every scalar eval metric the model defines, computed over the held-out loader (empty before an eval)."""
    values = {}
    for name, metric in trainer.state.eval_metrics.get('eval', {}).items():
        value = metric.compute()
        if getattr(value, 'numel', lambda: 1)() == 1:
            values[name] = float(value)
    return values
