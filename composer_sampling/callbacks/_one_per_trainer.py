"""The refusal of a second instance of a callback that a Trainer may hold only once."""

from __future__ import annotations

from collections.abc import Callable

from composer.core import Callback, State

__all__ = ['SecondCallbackError', 'refuse_a_second']


class SecondCallbackError(ValueError):
    """A Trainer holds a second instance of a callback that it may hold only once; the message names both."""


def refuse_a_second(kind: type[Callback], state: State, message: Callable[[int, list[str]], str]) -> None:
    """Raise :class:`SecondCallbackError` when the Trainer holds more than one ``kind`` callback.

    Both of our Composer callbacks refuse a second instance of themselves with this
    error, a ``ValueError``, when the Trainer is built (``Event.INIT``), before anything
    is trained.

    Args:
        kind: the callback class.
        state: the Trainer's state, whose ``callbacks`` are checked.
        message: builds the message from the number of instances and the repr of each.
    """
    found = [callback for callback in state.callbacks if isinstance(callback, kind)]
    if len(found) > 1:
        raise SecondCallbackError(message(len(found), [repr(callback) for callback in found]))
