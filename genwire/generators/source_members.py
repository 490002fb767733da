"""The live side of the static check (SPEC §15): what a generator class's methods are at
run time (each one its MRO resolves, a property's getter, a wrapped function unwrapped)
and how a call's arguments land in the callee's parameters. ``source_check`` pairs these
with what ``source_scan`` read from the files."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from types import FunctionType
from typing import Any

from genwire.generators.source_scan import Role, function_key


def code_key(fn: FunctionType) -> str:
    return function_key(fn.__code__.co_firstlineno, fn.__code__.co_name)


def resolved_names(klass: type) -> dict[str, type]:
    """Each attribute name -> the class of ``klass``'s MRO it resolves to."""
    out: dict[str, type] = {}
    for k in klass.__mro__:
        for name in vars(k):
            out.setdefault(name, k)
    return out


def generated_method(klass: type, name: str, fn: FunctionType) -> bool:
    """A dataclass's generated ``__init__``/``__eq__``/...: code with no file, none of it the plugin's."""
    dunder = name.startswith("__") and name.endswith("__")
    return dunder and dataclasses.is_dataclass(klass) and fn.__code__.co_filename.startswith("<")


def param_names(fn: FunctionType) -> list[str]:
    code = fn.__code__
    return list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])


def kwargs_name(fn: FunctionType) -> str | None:
    code = fn.__code__
    if not code.co_flags & inspect.CO_VARKEYWORDS:
        return None
    at = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)
    return code.co_varnames[at]


def map_args(fn: FunctionType, args: list[tuple[int | str, Role]], offset: int) -> dict[str, Role] | None:
    """The callee's parameter roles for a call's argument roles (``-1``: the bound ``self``);
    ``None`` when an argument has no parameter to land in."""
    params = param_names(fn)
    code = fn.__code__
    positional = params[: code.co_argcount]
    kwargs = kwargs_name(fn)
    roles: dict[str, Role] = {}
    for at, role in args:
        if at == -1:
            if not positional:
                return None
            roles[positional[0]] = role
        elif isinstance(at, int):
            if at + offset >= len(positional):
                return None
            roles[positional[at + offset]] = role
        elif at in params:
            roles[at] = role
        elif kwargs is not None and at == "resources" and role is Role.RES:
            roles[kwargs] = Role.KW  # **kwargs holding "resources"
        else:
            return None
    return roles


def map_names(params: list[str], args: list[tuple[int | str, Role]], offset: int) -> dict[str, Role] | None:
    roles: dict[str, Role] = {}
    for at, role in args:
        if isinstance(at, int):
            if at + offset >= len(params):
                return None
            roles[params[at + offset]] = role
        elif at in params:
            roles[at] = role
        else:
            return None
    return roles


def class_methods(klass: type, keep: Callable[[type], bool]) -> Iterable[tuple[str, type, FunctionType]]:
    """(name, defining class, function) of every method ``klass`` resolves through its MRO,
    from the classes ``keep`` accepts: the overridden bodies of parents are not among them."""
    seen: set[str] = set()
    for k in klass.__mro__:
        for name, value in vars(k).items():
            if name in seen:
                continue
            seen.add(name)
            if not keep(k):
                continue
            for fn in functions_of(value):
                yield name, k, fn


def functions_of(value: object) -> list[FunctionType]:
    """The functions a class attribute runs with the instance as first argument."""
    if isinstance(value, staticmethod | classmethod):
        return []  # read when a call hands them the generator
    if isinstance(value, property):
        candidates: list[Any] = [value.fget, value.fset, value.fdel]
    elif isinstance(value, FunctionType):
        candidates = [value]
    else:
        candidates = [getattr(value, "func", None)]  # functools.cached_property, partialmethod
    out = []
    for c in candidates:
        if callable(c):
            c = inspect.unwrap(c)
            if isinstance(c, FunctionType):
                out.append(c)
    return out
