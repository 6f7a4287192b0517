"""Methods replaced on an instance, and put back.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable
from typing import Any, cast

__all__ = ["StateWithoutOurs", "pickled_as", "put_on_instance", "take_off_instance"]


# Lightning looks each method below up on the instance, so an instance attribute runs first. The
# library puts its own there for a fit and takes it off again, putting back what the instance had
# before (a user's own replacement, such as ``trainer.fit_loop.epoch_loop.val_loop.run = ...``), and
# leaves alone anything set after it.
#
# An object with Python's own attribute machinery (the loops, the logger connector) is read and
# written with getattr, setattr and delattr, never through its ``__dict__``: on CPython 3.11,
# reading an instance's ``__dict__`` turns its attributes into a dict for good, and every attribute
# read and method call on that object afterwards takes the interpreter's unspecialized path. Done to
# the fit and epoch loops and the logger connector, that cost more per training step than the rest
# of exact resume together (``benchmarks/README.md``). An object with attribute machinery of its own
# (a ``unittest.mock.Mock`` logger or callback, which records a deleted attribute and raises on it
# afterwards) is written through its ``__dict__``, so that it is left as it was.


_ABSENT: Any = object()


_PREVIOUS = "_lightning_step_types_previous"  # on the library's callable: what the instance had before it


def put_on_instance(instance: Any, name: str, value: Callable[..., Any]) -> None:
    """``instance.<name> = value``, remembering what the instance had before the library's (one of
    the library's own still there is replaced, never remembered)."""
    current: Any = _own_attribute(instance, name)
    vars(value)[_PREVIOUS] = vars(current)[_PREVIOUS] if _is_ours(current) else current
    _store(instance, name, value)


def take_off_instance(instance: Any, name: str) -> None:
    """Undo `put_on_instance`: what the instance had before it goes back. Anything else is left alone."""
    current: Any = _own_attribute(instance, name)
    if not _is_ours(current):
        return
    previous = cast("dict[str, Any]", vars(current))[_PREVIOUS]
    if previous is not _ABSENT:
        _store(instance, name, previous)
    elif _plain_attributes(instance):
        delattr(instance, name)
    else:
        del instance.__dict__[name]


def _as_it_was(value: object) -> object:
    return value


def pickled_as(original: object) -> tuple[Callable[[object], object], tuple[object]]:
    """``__reduce__`` of a callable object the library puts on an instance in place of ``original``: a
    pickled or deep-copied instance holds ``original`` (a method of its class comes back bound to the
    copy), never the library's callable, which refers to one fit's state (the trainer, through weak
    references) and cannot be pickled. Plain Lightning's callbacks and loggers pickle in the middle of a
    fit, and projects rely on it: neuralforecast's models keep their ``callbacks=[...]`` in
    ``save_hyperparameters()``, so each checkpoint pickles them. (A ``ModelCheckpoint`` also gets
    `StateWithoutOurs`, so that its pickled state holds exactly plain Lightning's attributes.)"""
    return (_as_it_was, (original,))


def _store(instance: Any, name: str, value: object) -> None:
    if _plain_attributes(instance):
        setattr(instance, name, value)
    else:
        instance.__dict__[name] = value


def _own_attribute(instance: Any, name: str) -> Any:
    """What ``instance`` holds under ``name`` itself, not through its class; ``_ABSENT`` if nothing."""
    if not _plain_attributes(instance):
        return instance.__dict__.get(name, _ABSENT)
    found: Any = getattr(instance, name, _ABSENT)
    kind: Any = type(cast(object, instance))  # not __class__, which a Mock(spec=...) overrides
    on_class: Any = getattr(kind, name, _ABSENT)
    if found is _ABSENT or found is on_class:
        return _ABSENT
    # a method defined on the class, bound on this lookup: the instance holds nothing of its own
    if getattr(found, "__self__", None) is instance and getattr(found, "__func__", _ABSENT) is on_class:
        return _ABSENT
    # a built-in method of the class (``object.__getstate__``), bound on this lookup: nothing of its own
    if (
        isinstance(found, types.BuiltinMethodType)
        and found.__self__ is instance
        and isinstance(on_class, (types.MethodDescriptorType, types.WrapperDescriptorType))
        and found == on_class.__get__(instance, kind)
    ):
        return _ABSENT
    return found


def _plain_attributes(instance: Any) -> bool:
    """Whether the instance's class keeps ``object``'s own attribute lookup, assignment and deletion."""
    cls: Any = type(cast(object, instance))  # not __class__, which a Mock(spec=...) overrides
    return (
        cls.__getattribute__ is object.__getattribute__
        and cls.__setattr__ is object.__setattr__
        and cls.__delattr__ is object.__delattr__
        and not hasattr(cls, "__getattr__")
    )


def _is_ours(value: object) -> bool:
    attributes: Any = getattr(value, "__dict__", None)  # a function's, a partial's, or a callable object's
    return isinstance(attributes, dict) and _PREVIOUS in attributes


class StateWithoutOurs:
    """An instance's ``__getstate__`` while the library's callables are on it: its state without them.

    ``pickle``, ``torch.save`` and ``copy.deepcopy`` take an object's state from ``obj.__getstate__()``,
    looked up on the instance first. Put on an instance (``put_on_instance(obj, "__getstate__", ...)``)
    beside the library's callables, this one calls what the instance had (its own, or its class's) and
    puts back, in a copy of that state, what each of the library's callables replaced: they are closures
    over the fit, which would fail to pickle (a ``ModelCheckpoint`` that a module keeps in its
    hyperparameters, as neuralforecast's modules keep the Trainer's callbacks, is pickled into every
    checkpoint) and would tie a deep copy to the original.
    """

    def __init__(self, instance: Any) -> None:
        self._instance = weakref.ref(instance)  # the instance holds this object: no cycle to wait for the GC

    def __call__(self) -> object:
        instance: Any = self._instance()
        previous: Any = vars(self).get(_PREVIOUS, _ABSENT)
        if previous is not _ABSENT:
            state: object = previous()
        else:  # the class's (Python 3.10's object has none: its default state is the __dict__)
            class_getstate: Any = getattr(type(cast(object, instance)), "__getstate__", None)
            state = class_getstate(instance) if class_getstate is not None else instance.__dict__
        if not isinstance(state, dict):  # a class with its own kind of state keeps it
            return state
        plain: dict[str, Any] = dict(cast("dict[str, Any]", state))  # a copy: it may be the live __dict__
        for name, value in list(plain.items()):
            if _is_ours(value):
                before: Any = cast("dict[str, Any]", vars(value))[_PREVIOUS]
                if before is _ABSENT:
                    del plain[name]
                else:
                    plain[name] = before
        return plain
