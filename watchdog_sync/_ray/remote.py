"""``remote``: ``ray.remote`` whose tasks and actor method calls carry the caller's deadline.

A wrapped function becomes a Ray task whose first argument is what
``carry.carried_now()`` read from the caller's scope when ``.remote()`` was
called; on the worker ``carry.run_carried()`` runs the function inside a scope
of the time left. An actor class becomes a subclass whose public methods take
the same extra first argument; the handle returned by ``.remote()`` adds it to
each call. Ray is imported when a task is first sent (or an actor created),
not when a function is decorated. The arguments are checked against the
wrapped function's own signature when sent, as Ray would check them.
"""

from __future__ import annotations

import inspect
import threading
import types
from typing import Any, Callable, Dict, Optional, Tuple

from .carry import carried_now, run_carried
from .lazy import import_ray

__all__ = ["ActorHandle", "RemoteClass", "RemoteFunction", "RemoteMethod", "remote"]


def remote(fn: Any = None, **ray_options: Any) -> Any:
    """Like ``ray.remote``, for functions and actor classes; see ``watchdog_sync.ray.remote``."""
    if fn is None:
        return lambda target: _wrap(target, ray_options)
    return _wrap(fn, ray_options)


def _wrap(target: Any, options: Dict[str, Any]) -> Any:
    if inspect.isclass(target):
        return RemoteClass(target, options)
    if isinstance(target, types.FunctionType):
        _refuse_generators(target, f"function {target.__qualname__!r}")
        return RemoteFunction(target, options)
    raise TypeError(
        "watchdog_sync.ray.remote expects a function (def) or a class, got "
        f"{type(target).__name__}; wrap other callables in a def"
    )


def _refuse_generators(fn: Any, what: str) -> None:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"watchdog_sync.ray.remote: {what} is async; the deadline scope is synchronous, "
            "so async tasks and actors are not supported (use ray.remote for them)"
        )
    if inspect.isgeneratorfunction(fn):
        raise TypeError(
            f"watchdog_sync.ray.remote: {what} is a generator; its body runs after the task "
            "returns it, outside any scope, so generator tasks are not supported (return a list)"
        )


def _check_arguments(
    signature: Optional[inspect.Signature], name: str, *args: Any, **kwargs: Any
) -> None:
    if signature is None:
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name}.remote(): {exc}") from None


def _signature(fn: Any) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _named_like(wrapper: Callable[..., Any], original: Any) -> Callable[..., Any]:
    """``wrapper`` with ``original``'s names and Ray's markers, but no ``__wrapped__``.

    Ray reads a function's signature through ``inspect.signature``, which would follow
    ``__wrapped__`` to the original and reject the carried deadline argument.
    """
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attr, getattr(original, attr, None))
    for key, value in getattr(original, "__dict__", {}).items():
        if key != "__wrapped__":
            wrapper.__dict__.setdefault(key, value)
    return wrapper


def _task_for(fn: Callable[..., Any], stage: str) -> Callable[..., Any]:
    def task(carried: Any, *args: Any, **kwargs: Any) -> Any:
        return run_carried(carried, stage, fn, args, kwargs)

    return _named_like(task, fn)


class RemoteFunction:
    """A function decorated with ``watchdog_sync.ray.remote``: ``.remote(...)`` sends its task."""

    def __init__(self, fn: Callable[..., Any], options: Dict[str, Any]) -> None:
        self._fn = fn
        self._options = dict(options)
        self._stage = f"ray:{fn.__qualname__}"
        self._signature = _signature(fn)
        self._lock = threading.Lock()
        self._ray_function: Any = None
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"remote function {self._fn.__qualname__!r} cannot be called directly: "
            f"use {self._fn.__name__}.remote(...) to send it as a Ray task"
        )

    def ray_function(self) -> Any:
        """The underlying ``ray.remote_function.RemoteFunction`` (made at first use)."""
        with self._lock:
            if self._ray_function is None:
                ray = import_ray()
                task = _task_for(self._fn, self._stage)
                made = ray.remote(**self._options)(task) if self._options else ray.remote(task)
                self._ray_function = made
            return self._ray_function

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Send the task; inside a ``deadline()`` scope it carries the time left. Returns its ObjectRef(s).

        Raises :class:`~watchdog_sync.Cancelled` when the scope has already ended
        (the scope turns it into ``DeadlineExceeded``), and ``TypeError`` when the
        arguments do not fit the function.
        """
        _check_arguments(self._signature, self._fn.__qualname__, *args, **kwargs)
        return self.ray_function().remote(carried_now(), *args, **kwargs)

    def options(self, **options: Any) -> _Sender:
        """Like Ray's ``.options(...)``: ``f.options(num_cpus=2).remote(...)``."""
        ray_function = self.ray_function()
        name = self._fn.__qualname__
        return _Sender(ray_function.options(**options), self._signature, name)


class _Sender:
    """What ``.options(...)`` returns: its ``.remote()`` sends with the deadline carried."""

    def __init__(self, target: Any, signature: Optional[inspect.Signature], name: str) -> None:
        self._target = target
        self._signature = signature
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Send the call with the current scope's deadline carried (see ``RemoteFunction.remote``)."""
        _check_arguments(self._signature, self._name, *args, **kwargs)
        return self._target.remote(carried_now(), *args, **kwargs)


def _carrying_method(method: Callable[..., Any], stage: str) -> Callable[..., Any]:
    def call(self: Any, carried: Any, *args: Any, **kwargs: Any) -> Any:
        return run_carried(carried, stage, method, (self, *args), kwargs)

    return _named_like(call, method)


def _carried_methods(cls: type) -> Dict[str, Callable[..., Any]]:
    """The methods whose calls carry the deadline: every plain function but dunders."""
    methods: Dict[str, Callable[..., Any]] = {}
    for name in dir(cls):
        if name.startswith("__") and name.endswith("__"):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, types.FunctionType):
            _refuse_generators(value, f"method {cls.__qualname__}.{name}")
            methods[name] = value
    return methods


class RemoteClass:
    """An actor class decorated with ``watchdog_sync.ray.remote``: ``.remote(...)`` creates an actor."""

    def __init__(self, cls: type, options: Dict[str, Any]) -> None:
        self._cls = cls
        self._options = dict(options)
        self._methods = _carried_methods(cls)
        self._signatures = {name: _signature(fn) for name, fn in self._methods.items()}
        self._lock = threading.Lock()
        self._ray_class: Any = None
        self.__doc__ = cls.__doc__
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"actor class {self._cls.__qualname__!r} cannot be instantiated directly: "
            f"use {self._cls.__name__}.remote(...) to create the actor"
        )

    def ray_class(self) -> Any:
        """The underlying ``ray.actor.ActorClass`` (made at first use)."""
        with self._lock:
            if self._ray_class is None:
                ray = import_ray()
                prefix = f"ray:{self._cls.__qualname__}."
                namespace = {
                    name: _carrying_method(fn, prefix + name) for name, fn in self._methods.items()
                }
                carrying = type(self._cls.__name__, (self._cls,), namespace)
                carrying.__qualname__ = self._cls.__qualname__
                carrying.__module__ = self._cls.__module__
                carrying.__doc__ = self._cls.__doc__
                made = (
                    ray.remote(**self._options)(carrying) if self._options else ray.remote(carrying)
                )
                self._ray_class = made
            return self._ray_class

    def _handle(self, handle: Any) -> ActorHandle:
        return ActorHandle(handle, self._cls.__qualname__, self._signatures)

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        """Create the actor; its handle's method calls carry the caller's deadline."""
        return self._handle(self.ray_class().remote(*args, **kwargs))

    def options(self, **options: Any) -> _ActorMaker:
        """Like Ray's ``.options(...)``: ``Cls.options(name="a").remote(...)``."""
        return _ActorMaker(self, self.ray_class().options(**options))


class _ActorMaker:
    def __init__(self, owner: RemoteClass, target: Any) -> None:
        self._owner = owner
        self._target = target

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        """Create the actor with the given options."""
        return self._owner._handle(self._target.remote(*args, **kwargs))


_OWN = frozenset({"_ray_handle", "_class_name", "_signatures"})


class ActorHandle:
    """An actor created through ``watchdog_sync.ray.remote``: ``handle.method.remote(...)``.

    Calls of the class's own methods carry the caller's deadline; every other
    attribute is the Ray handle's. ``ray_handle`` is the Ray ``ActorHandle``
    itself (for ``ray.kill``, or to pass to code that expects one).
    """

    def __init__(
        self,
        ray_handle: Any,
        class_name: str,
        signatures: Dict[str, Optional[inspect.Signature]],
    ) -> None:
        self._ray_handle = ray_handle
        self._class_name = class_name
        self._signatures = signatures

    @property
    def ray_handle(self) -> Any:
        """The Ray ``ActorHandle`` under this one."""
        return self._ray_handle

    def __getattr__(self, name: str) -> Any:
        if name in _OWN or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        target = getattr(self._ray_handle, name)
        if name not in self._signatures:
            return target
        return RemoteMethod(target, f"{self._class_name}.{name}", self._signatures[name])

    def __repr__(self) -> str:
        return f"<watchdog_sync.ray ActorHandle {self._class_name} {self._ray_handle!r}>"

    def __reduce__(self) -> Tuple[Any, ...]:
        return (ActorHandle, (self._ray_handle, self._class_name, self._signatures))


class RemoteMethod:
    """One method of an actor handle: ``.remote(...)`` sends the call with the deadline carried."""

    def __init__(self, method: Any, name: str, signature: Optional[inspect.Signature]) -> None:
        self._method = method
        self._name = name
        self._signature = signature

    def _check(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        _check_arguments(self._signature, self._name, None, *args, **kwargs)  # None: self

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Send the call; inside a ``deadline()`` scope it carries the time left."""
        self._check(args, kwargs)
        return self._method.remote(carried_now(), *args, **kwargs)

    def options(self, **options: Any) -> _MethodSender:
        """Like Ray's ``handle.method.options(...)``."""
        return _MethodSender(self, self._method.options(**options))


class _MethodSender:
    def __init__(self, owner: RemoteMethod, target: Any) -> None:
        self._owner = owner
        self._target = target

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Send the call with the given options and the deadline carried."""
        self._owner._check(args, kwargs)
        return self._target.remote(carried_now(), *args, **kwargs)
