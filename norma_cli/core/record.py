"""``@record``: typed data classes, defined quickly.

The standard ``dataclasses`` module costs a one-shot ``norma run`` about a third of its
start-up: importing it pulls in ``inspect`` (with ``ast``, ``dis`` and ``tokenize``), and each
class it decorates runs a separate ``exec`` per generated method. norma defines dozens of data
classes on the path of every call, so this module does the same job with one ``exec`` per
class and no heavy imports. It covers what norma uses and nothing more: defaults,
``field(default_factory=..., init=..., repr=..., compare=...)``, ``frozen=True`` (hashable by
value), ``__post_init__``, inheritance from another record, ``fields``, ``replace`` and
``asdict``. The generated methods behave as the dataclass ones do: ``__init__`` takes the fields
in order, ``__eq__`` compares same-class instances field by field, ``__repr__`` shows
``Name(a=1, b='x')``; a non-frozen record is unhashable. Type checkers see a dataclass
(``dataclass_transform``).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    __slots__ = ("compare", "default", "default_factory", "init", "name", "repr")

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        init: bool = True,
        repr: bool = True,
        compare: bool = True,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r})"


@overload
def field(*, default: T, init: bool = ..., repr: bool = ..., compare: bool = ...) -> T: ...
@overload
def field(
    *, default_factory: Callable[[], T], init: bool = ..., repr: bool = ..., compare: bool = ...
) -> T: ...
@overload
def field(*, init: bool = ..., repr: bool = ..., compare: bool = ...) -> Any: ...
def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """Per-field options, as ``dataclasses.field``."""
    return Field(default, default_factory, init, repr, compare)


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, frozen: bool = False) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform(field_specifiers=(field, Field))
def record(cls: Any = None, /, *, frozen: bool = False) -> Any:
    """Make ``cls`` a data class: ``@record`` or ``@record(frozen=True)``."""
    if cls is None:
        return lambda c: _build(c, frozen)
    return _build(cls, frozen)


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _build(cls: type[T], frozen: bool) -> type[T]:
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in getattr(base, "__record_fields__", ()):
            found[f.name] = f
    # (inspect.get_annotations would import inspect: the very cost this module avoids)
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
        if _is_classvar(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(default=value)
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"mutable default for field {name!r}: use default_factory")
        f.name = name
        found.pop(name, None)  # a redefined field keeps the subclass's place, as dataclasses
        found[name] = f
        if isinstance(value, Field):  # the class keeps a plain default, never the Field
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    fields_ = tuple(found.values())

    env: dict[str, Any] = {"MISSING": MISSING, "__setattr": object.__setattr__}
    params, body = [], []
    seen_default = False
    for f in fields_:
        set_ = (f"__setattr(self, {f.name!r}, {{}})" if frozen else f"self.{f.name} = {{}}").format
        if f.init:
            if f.default is not MISSING:
                env[f"_d_{f.name}"] = f.default
                params.append(f"{f.name}=_d_{f.name}")
                seen_default = True
            elif f.default_factory is not MISSING:
                env[f"_f_{f.name}"] = f.default_factory
                params.append(f"{f.name}=MISSING")
                seen_default = True
            else:
                if seen_default:
                    raise TypeError(f"non-default argument {f.name!r} follows default argument")
                params.append(f.name)
            if f.default_factory is not MISSING:
                body.append(set_(f"_f_{f.name}() if {f.name} is MISSING else {f.name}"))
            else:
                body.append(set_(f.name))
        elif f.default_factory is not MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            body.append(set_(f"_f_{f.name}()"))
        elif f.default is not MISSING:
            env[f"_d_{f.name}"] = f.default
            body.append(set_(f"_d_{f.name}"))
    if "__post_init__" in _attrs(cls):
        body.append("self.__post_init__()")
    # Only __init__ is compiled (it runs for every instance); the other methods are closures
    # over the field names, with a C-level attrgetter where speed matters (eq, hash).
    lines = [f"def __init__(self, {', '.join(params)}):", *(f"    {b}" for b in body or ["pass"])]
    exec("\n".join(lines), env)  # the source is built from field names only
    methods: dict[str, Any] = {"__init__": env["__init__"]}
    compared = tuple(f.name for f in fields_ if f.compare)
    key = _key(compared)
    shown = tuple(f.name for f in fields_ if f.repr)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return key(self) == key(other)

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    methods["__eq__"], methods["__repr__"] = __eq__, __repr__
    if frozen:
        names = frozenset(f.name for f in fields_)

        def __setattr__(self: Any, name: str, value: Any) -> None:
            if name in names:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            object.__setattr__(self, name, value)

        def __delattr__(self: Any, name: str) -> None:
            if name in names:
                raise FrozenInstanceError(f"cannot delete field {name!r}")
            object.__delattr__(self, name)

        def __hash__(self: Any) -> int:
            return hash(key(self))

        methods.update(__setattr__=__setattr__, __delattr__=__delattr__, __hash__=__hash__)
    explicit_hash = cls.__dict__.get("__hash__") is not None
    for name, fn in methods.items():
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        if name not in cls.__dict__ or (name == "__hash__" and not explicit_hash):
            setattr(cls, name, fn)  # a method written in the class body wins, as dataclasses
    if not frozen and not explicit_hash:
        cls.__hash__ = None  # type: ignore[assignment]  # mutable and compared by value
    cls.__record_fields__ = fields_  # type: ignore[attr-defined]
    setattr(cls, "__match_args__", tuple(f.name for f in fields_ if f.init))  # noqa: B010
    return cls


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The compared fields' values as one tuple, read in C."""
    if len(names) >= 2:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _attrs(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name in klass.__dict__}


def fields(obj: Any) -> tuple[Field, ...]:
    """The fields of a record (class or instance), in order."""
    try:
        return obj.__record_fields__
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of ``obj`` with ``changes`` applied (through ``__init__``, as dataclasses)."""
    for f in fields(obj):
        if f.init and f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
        elif not f.init and f.name in changes:
            raise ValueError(f"field {f.name!r} is not set by __init__")
    return obj.__class__(**changes)


def asdict(obj: Any) -> dict[str, Any]:
    """A record as a dict, converting nested records, lists, tuples and dicts (deep copies)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def _plain(value: Any) -> Any:
    if hasattr(type(value), "__record_fields__"):
        return asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return (
            type(value)(*map(_plain, value))
            if hasattr(value, "_fields")
            else tuple(_plain(v) for v in value)
        )
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
