"""Pydantic models built from the TypedDicts of `nanum.jobfields`, so that the server checks, documents and refuses
each field exactly as it is declared there.

Each key becomes a field of the model, in the declared order (pydantic reports the first field it refuses in that
order, and the API's 422 names it): its type is the annotation's, and its `Spec` becomes pydantic's `Field` (the
default, the bounds, the description). A `Spec` inside a type, as in `list[Name]`, bounds each value. A TypedDict
inside a type (a `Segment` in `Job.segments`) becomes the model given for it, so OpenAPI names it as before.
"""

from __future__ import annotations

import functools
import operator
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar, Union

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

from nanum.jobfields import Spec

Model = TypeVar("Model", bound=BaseModel)


def model(name: str, declared: type, base: type[Model], *, doc: str | None = None,
          models: Mapping[type, type[BaseModel]] | None = None) -> type[Model]:
    """A model called `name`, on `base`, with one field for each key of the TypedDict `declared`; `models` says
    which model stands for each TypedDict found inside a field's type."""
    hints = typing.get_type_hints(declared, include_extras=True)
    fields: dict[str, Any] = {key: _field(hint, models or {}) for key, hint in hints.items()}
    return create_model(name, __base__=base, __module__=base.__module__, __doc__=doc, **fields)


def changes_model(name: str, changes: type, declared: type, base: type[Model], *, doc: str | None = None,
                  more: Mapping[str, Mapping[str, Any]] | None = None) -> type[Model]:
    """A model called `name`, on `base`, of a change: one field for each key of the TypedDict `changes`, typed and
    bounded as the same key of `declared` is (a change asks no more than a submission may), left out by default
    (None); `more` adds bounds of its own to a field."""
    hints = typing.get_type_hints(declared, include_extras=True)
    fields: dict[str, Any] = {}
    for key in typing.get_type_hints(changes):
        typed, info = _field(hints[key], {}, default=None, **(more or {}).get(key, {}))
        fields[key] = (typed | None, info)
    return create_model(name, __base__=base, __module__=base.__module__, __doc__=doc, **fields)


def field(spec: Spec, **more: Any) -> Any:
    """Pydantic's `Field` for `spec` (with `more` arguments, which win over its own)."""
    kwargs = {"default": spec.default, **spec.checks()}
    if spec.description:
        kwargs["description"] = spec.description
    return Field(**(kwargs | more))


def _field(hint: Any, models: Mapping[type, type[BaseModel]], **more: Any) -> tuple[Any, FieldInfo]:
    if typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        hint = typing.get_args(hint)[0]
    spec = Spec()
    if typing.get_origin(hint) is Annotated:
        hint, *meta = typing.get_args(hint)
        spec = next((m for m in meta if isinstance(m, Spec)), spec)
    info: FieldInfo = field(spec, **more)
    return _typed(hint, models), info


def _typed(hint: Any, models: Mapping[type, type[BaseModel]]) -> Any:
    """`hint` with each `Spec` in it made pydantic's `Field`, and each TypedDict in `models` made its model."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        inner, *meta = args
        converted = [Field(**m.checks()) if isinstance(m, Spec) else m for m in meta]
        return Annotated[(_typed(inner, models), *converted)]
    if origin in (Union, types.UnionType):
        return functools.reduce(operator.or_, (_typed(arg, models) for arg in args))
    if origin in (list, dict):
        return origin[tuple(_typed(arg, models) for arg in args)]
    return models.get(hint, hint)
