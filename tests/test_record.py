"""``@record`` behaves as ``@dataclass`` for everything norma uses, checked side by side."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from norma_cli.core.record import FrozenInstanceError, asdict, field, fields, record, replace


def pair(frozen: bool = False) -> tuple[type, type]:
    """The same class made by each decorator."""

    def body() -> dict[str, Any]:
        return {
            "__annotations__": {
                "a": "int",
                "b": "str",
                "tags": "list[str]",
                "secret": "str",
                "note": "str",
                "count": "int",
            },
            "b": "x",
            "secret": "s",
            "note": "",
            "count": 0,
        }

    ours_ns, theirs_ns = body(), body()
    ours_ns["tags"] = field(default_factory=list)
    ours_ns["secret"] = field(default="s", repr=False)
    ours_ns["note"] = field(default="", compare=False)
    ours_ns["count"] = field(init=False, default=0)
    theirs_ns["tags"] = dataclasses.field(default_factory=list)
    theirs_ns["secret"] = dataclasses.field(default="s", repr=False)
    theirs_ns["note"] = dataclasses.field(default="", compare=False)
    theirs_ns["count"] = dataclasses.field(init=False, default=0)
    ours = record(frozen=frozen)(type("Thing", (), ours_ns))
    theirs = dataclasses.dataclass(frozen=frozen)(type("Thing", (), theirs_ns))
    return ours, theirs


@pytest.mark.parametrize("frozen", [False, True])
def test_same_behaviour_as_dataclasses(frozen: bool) -> None:
    ours, theirs = pair(frozen)
    for make in (lambda c: c(1), lambda c: c(2, "y", ["t"]), lambda c: c(a=3, note="n")):
        mine, ref = make(ours), make(theirs)
        assert repr(mine) == repr(ref)
        assert [f.name for f in fields(mine)] == [f.name for f in dataclasses.fields(ref)]
        assert asdict(mine) == dataclasses.asdict(ref)
    assert ours(1) == ours(1) and ours(1) != ours(2)
    assert ours(1, note="a") == ours(1, note="b")  # compare=False
    assert ours(1).tags is not ours(1).tags  # a fresh default per instance
    assert ours(1).__eq__(theirs(1)) is NotImplemented
    assert ours.__match_args__ == theirs.__match_args__
    if frozen:
        with pytest.raises(FrozenInstanceError):
            ours(1).a = 2  # type: ignore[misc]
        with pytest.raises(AttributeError):
            del ours(1).b
    else:
        with pytest.raises(TypeError, match="unhashable"):
            hash(ours(1))
        thing = ours(1)
        thing.a = 5
        assert thing.a == 5


def test_replace_fields_and_post_init() -> None:
    seen: list[int] = []

    @record
    class Point:
        x: int
        y: int = 0
        label: str = field(default="", repr=False)

        def __post_init__(self) -> None:
            seen.append(self.x)

    p = Point(1, 2, "a")
    q = replace(p, y=5)
    assert (q.x, q.y, q.label) == (1, 5, "a") and seen == [1, 1]
    assert repr(q) == "test_replace_fields_and_post_init.<locals>.Point(x=1, y=5)"
    assert [f.name for f in fields(Point)] == ["x", "y", "label"]
    with pytest.raises(TypeError):
        fields(object())


def test_inheritance_and_nested_asdict() -> None:
    @record(frozen=True)
    class Base:
        a: int
        b: int = 1

    @record(frozen=True)
    class Child(Base):
        c: tuple[int, ...] = ()

    @record
    class Holder:
        items: list[Any] = field(default_factory=list)
        by_name: dict[str, Any] = field(default_factory=dict)

    child = Child(1, 2, (3,))
    assert (child.a, child.b, child.c) == (1, 2, (3,))
    assert child == Child(1, 2, (3,)) and child != Base(1, 2)
    assert {child, Child(1, 2, (3,))} == {child}
    held = Holder([child], {"k": Base(0)})
    assert asdict(held) == {
        "items": [{"a": 1, "b": 2, "c": (3,)}],
        "by_name": {"k": {"a": 0, "b": 1}},
    }


def test_mistakes_are_refused_at_definition() -> None:
    with pytest.raises(ValueError, match="mutable default"):

        @record
        class Bad:
            items: list[int] = []

    with pytest.raises(TypeError, match="follows default"):

        @record
        class Order:
            a: int = 0
            b: int  # type: ignore[misc]

    with pytest.raises(ValueError, match="both default and default_factory"):
        field(default=1, default_factory=int)  # type: ignore[call-overload]


def test_a_one_shot_read_imports_neither_dataclasses_nor_inspect(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("hi\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "norma_cli",
            "run",
            "Read",
            "--arg",
            "file_path=f.txt",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    imported = {m.group(1) for m in re.finditer(r"\|\s+([\w.]+)\s*$", proc.stderr, re.M)}
    assert "norma_cli.core.executor" in imported and "hi" in proc.stdout
    assert imported.isdisjoint({"dataclasses", "inspect"}), sorted(
        imported & {"dataclasses", "inspect"}
    )


def test_no_module_of_norma_uses_dataclasses() -> None:
    # One way to define data classes: @record. A stray dataclasses import brings inspect back.
    package = Path(__file__).resolve().parent.parent / "norma_cli"
    users = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if re.search(r"^\s*(from dataclasses import|import dataclasses)", p.read_text(), re.M)
    ]
    assert users == []
