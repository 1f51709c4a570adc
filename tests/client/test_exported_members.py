"""``meshctl``'s face is complete: ``__all__`` is every public name, and every type a
public method hands back (or hands to a callback) can be named from ``meshctl``.

httpx's tests/test_exported_members.py is the model: a user who gets an object from
the library can import its class from the package, without reaching into a private
module (``meshctl._async.session``) that may move.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import meshctl

#: Public-looking names the package keeps that are not part of its surface.
NOT_EXPORTED = {
    "TYPE_CHECKING",  # the start-up-cheap stand-in for typing.TYPE_CHECKING
    "annotations",  # from __future__ import annotations
}


def _classes_in(hint: Any) -> Iterator[type]:
    """Every class a type hint names (``list[Note] | None`` -> Note, list, NoneType)."""
    if isinstance(hint, type) and not typing.get_args(hint):
        yield hint
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        yield origin
    for arg in typing.get_args(hint):
        if isinstance(arg, list):  # Callable[[A, B], R]: the parameters
            for a in arg:
                yield from _classes_in(a)
        else:
            yield from _classes_in(arg)


def _hints(fn: Any) -> dict[str, Any]:
    """``typing.get_type_hints``, with the names a module imports only for the type
    checker (under its start-up-cheap ``TYPE_CHECKING = False``) put back first."""
    module = sys.modules[fn.__module__]
    namespace = dict(vars(module))
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            exec(compile(ast.Module(node.body, []), module.__name__, "exec"), namespace)
    return typing.get_type_hints(fn, globalns=namespace)


def _public_callables(cls: type) -> Iterator[tuple[str, Any]]:
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") and name not in ("__enter__", "__aenter__", "__aiter__"):
            continue
        fn = member.fget if isinstance(member, property) else member
        ours = str(getattr(fn, "__module__", "")).split(".")[0] in ("meshctl", "meshd")
        if ours and callable(fn) and not isinstance(fn, type):  # (a tuple's index: not ours)
            yield name, fn


def _handed_out() -> dict[str, str]:
    """Class name -> where it is handed out, for every class of ours reachable from
    the exported classes through their public methods' return types and the
    parameter types of the callbacks they take."""
    found: dict[str, str] = {}
    todo = [getattr(meshctl, name) for name in meshctl.__all__]
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        if not isinstance(cls, type) or cls in seen:
            continue
        seen.add(cls)
        for name, fn in _public_callables(cls):
            hints = _hints(fn)
            for key, hint in hints.items():
                for c in _classes_in(hint):
                    if c.__module__.split(".")[0] not in ("meshctl", "meshd"):
                        continue
                    if key == "return" or c is not hint:  # returned, or inside a callback
                        found.setdefault(c.__name__, f"{cls.__name__}.{name}")
                        todo.append(c)
    return found


def test_all_is_every_public_name() -> None:
    """``__all__`` lists exactly the public names the package has, once every one of
    them is loaded (they load lazily), sorted."""
    for name in meshctl.__all__:
        getattr(meshctl, name)
    public = {
        name
        for name, value in vars(meshctl).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in NOT_EXPORTED
    }

    assert sorted(public) == meshctl.__all__


def test_every_type_a_public_method_returns_is_exported() -> None:
    """``AsyncSession.claim`` returns an AsyncClaim, ``Session.signal`` a Signal,
    ``on_preempt`` hands its callback a PreemptEvent …: each one is in ``__all__``
    and is the very class the method hands out."""
    handed_out = _handed_out()
    missing = {name: where for name, where in handed_out.items() if name not in meshctl.__all__}

    assert missing == {}
    assert {"AsyncClaim", "Signal", "AsyncOnce", "PreemptEvent"} <= set(handed_out)


def test_exported_names_are_the_classes_handed_out() -> None:
    """What the face exports is the class itself, not a copy: ``isinstance`` works."""
    hints = _hints(meshctl.AsyncSession.claim)

    assert hints["return"] is meshctl.AsyncClaim
    assert _hints(meshctl.Session.signal)["return"] is meshctl.Signal
