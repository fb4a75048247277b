"""Which JSON Schema validator should norma use? Measured, not guessed.

Compares jsonschema-rs, python-jsonschema and fastjsonschema on

  (a) compliance with the official JSON-Schema-Test-Suite, draft 2020-12 (required and optional
      tests reported separately). fastjsonschema implements drafts 4/6/7 only; it is run on the
      2020-12 suite anyway so the report shows what a 2020-12 schema loses with it;
  (b) per-call validation cost on a realistic tool schema (compiled once), valid and invalid input;
  (c) import cost, each in a fresh interpreter.

The suite is not vendored: it ships inside the python-jsonschema sdist on PyPI, which this script
downloads once into bench/.data/ (gitignored) with pip. Remote refs (http://localhost:1234/...) are
answered from the suite's own remotes/ directory through each library's retrieval hook, so nothing
touches the network.

Run:  .venv/bin/python bench/schema_validators.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
SUITE_SDIST = ("jsonschema", "4.26.0")
REMOTE_BASE = "http://localhost:1234/"
LIBS = ("jsonschema-rs", "jsonschema", "fastjsonschema")
MODULES = {
    "jsonschema-rs": "jsonschema_rs",
    "jsonschema": "jsonschema",
    "fastjsonschema": "fastjsonschema",
}


# --------------------------------------------------------------------------- locating the suite


def locate_suite() -> Path | None:
    """Return the suite's root (holding tests/ and remotes/), downloading the sdist if needed."""
    name, version = SUITE_SDIST
    root = DATA / f"{name}-{version}" / "json"
    if (root / "tests" / "draft2020-12").is_dir():
        return root
    DATA.mkdir(parents=True, exist_ok=True)
    sdist = DATA / f"{name}-{version}.tar.gz"
    if not sdist.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
        cmd += ["--quiet", f"{name}=={version}", "-d", str(DATA)]
        try:
            subprocess.run(cmd, check=True, timeout=300, capture_output=True)
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"SKIP compliance: could not download the {name} sdist ({exc})")
            return None
    if not sdist.exists():
        print(f"SKIP compliance: pip did not produce {sdist.name}")
        return None
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"{name}-{version}/json/")]
        tar.extractall(DATA, members=members, filter="data")
    if not (root / "tests" / "draft2020-12").is_dir():
        print(f"SKIP compliance: {sdist.name} no longer ships json/tests/draft2020-12")
        return None
    return root


class Remotes:
    """The suite's remotes/ directory, keyed by the URL the tests use for it."""

    def __init__(self, root: Path) -> None:
        self.docs: dict[str, Any] = {}
        for path in sorted((root / "remotes").rglob("*.json")):
            rel = path.relative_to(root / "remotes").as_posix()
            self.docs[REMOTE_BASE + rel] = json.loads(path.read_text())
        self.missed: Counter[str] = Counter()

    def get(self, uri: str) -> Any:
        key = uri.split("#", 1)[0]
        if key in self.docs:
            return self.docs[key]
        self.missed[key] += 1
        raise LookupError(f"not a suite remote: {uri}")


def metaschemas() -> dict[str, Any]:
    """Official meta-schemas by URL (from jsonschema-specifications), for fastjsonschema, which has
    none built in; the other two libraries ship their own copies."""
    from jsonschema_specifications import REGISTRY

    out: dict[str, Any] = {}
    for uri in REGISTRY:
        out[uri.rstrip("#")] = REGISTRY.contents(uri)
    return out


# --------------------------------------------------------------------------- adapters

Validate = Callable[[Any], bool]


def make_rs(remotes: Remotes) -> Callable[[Any, bool], Validate]:
    import jsonschema_rs

    def compile_(schema: Any, formats: bool) -> Validate:
        v = jsonschema_rs.Draft202012Validator(
            schema, retriever=remotes.get, validate_formats=True if formats else None
        )
        return v.is_valid

    return compile_


def make_py(remotes: Remotes) -> Callable[[Any, bool], Validate]:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    def retrieve(uri: str) -> Resource[Any]:
        return Resource.from_contents(remotes.get(uri), default_specification=DRAFT202012)

    registry: Registry[Any] = Registry(retrieve=retrieve)  # type: ignore[call-arg]

    def compile_(schema: Any, formats: bool) -> Validate:
        checker = Draft202012Validator.FORMAT_CHECKER if formats else None
        v = Draft202012Validator(schema, registry=registry, format_checker=checker)
        return v.is_valid

    return compile_


def make_fast(remotes: Remotes) -> Callable[[Any, bool], Validate]:
    import fastjsonschema

    metas = metaschemas()

    def handler(uri: str) -> Any:
        key = uri.split("#", 1)[0].rstrip("#")
        if key in metas:
            return metas[key]
        return remotes.get(uri)

    handlers = {"http": handler, "https": handler}

    def compile_(schema: Any, formats: bool) -> Validate:
        fn = fastjsonschema.compile(
            schema, handlers=handlers, use_default=False, use_formats=formats
        )

        def is_valid(instance: Any) -> bool:
            try:
                fn(instance)
            except fastjsonschema.JsonSchemaValueException:
                return False
            return True

        return is_valid

    return compile_


ADAPTERS = {"jsonschema-rs": make_rs, "jsonschema": make_py, "fastjsonschema": make_fast}


# --------------------------------------------------------------------------- compliance


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0
    errored: int = 0  # the library raised (compiling or validating)
    failed_by_file: Counter[str] = field(default_factory=Counter)
    errored_by_file: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errored


def suite_files(root: Path) -> dict[str, list[Path]]:
    base = root / "tests" / "draft2020-12"
    required = sorted(base.glob("*.json"))
    optional = sorted(p for p in (base / "optional").rglob("*.json"))
    return {"required": required, "optional": optional}


def run_compliance(root: Path, lib: str) -> dict[str, Tally]:
    remotes = Remotes(root)
    compile_ = ADAPTERS[lib](remotes)
    base = root / "tests" / "draft2020-12"
    out: dict[str, Tally] = {}
    for part, files in suite_files(root).items():
        tally = Tally()
        for path in files:
            rel = path.relative_to(base).as_posix()
            # The suite asks for format *assertion* only in optional/format/ (elsewhere, format
            # is an annotation in 2020-12).
            formats = rel.startswith("optional/format/")
            for group in json.loads(path.read_text()):
                try:
                    is_valid: Validate | None = compile_(group["schema"], formats)
                except Exception:
                    is_valid = None
                for test in group["tests"]:
                    if is_valid is None:
                        tally.errored += 1
                        tally.errored_by_file[rel] += 1
                        continue
                    try:
                        got = is_valid(test["data"])
                    except Exception:
                        tally.errored += 1
                        tally.errored_by_file[rel] += 1
                        continue
                    if got == test["valid"]:
                        tally.passed += 1
                    else:
                        tally.failed += 1
                        tally.failed_by_file[rel] += 1
        out[part] = tally
    if remotes.missed:
        # Every remote the suite references is served, so a miss is a URI the suite defines inline
        # with $id that the library failed to index and tried to fetch: its tests count as raised.
        print(f"  {lib}: asked for {len(remotes.missed)} URI(s) that are inline $id resources,")
        print(f"    e.g. {', '.join(sorted(remotes.missed)[:3])}")
    return out


# --------------------------------------------------------------------------- per-call cost

TOOL_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "pattern": "^[^\\u0000]+$"},
        "mode": {"enum": ["read", "write", "append"]},
        "encoding": {"type": "string", "default": "utf-8"},
        "offset": {"type": "integer", "minimum": 0},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100000},
        "follow_symlinks": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "edits": {"type": "array", "items": {"$ref": "#/$defs/edit"}, "maxItems": 50},
    },
    "required": ["path", "mode"],
    "additionalProperties": False,
    "$defs": {
        "edit": {
            "type": "object",
            "properties": {
                "old": {"type": "string"},
                "new": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            "required": ["old", "new"],
            "additionalProperties": False,
        }
    },
}
VALID_INPUT = {
    "path": "src/app/main.py",
    "mode": "write",
    "encoding": "utf-8",
    "offset": 0,
    "limit": 2000,
    "tags": ["refactor", "small"],
    "edits": [{"old": "foo", "new": "bar"}, {"old": "x = 1", "new": "x = 2", "replace_all": True}],
}
INVALID_INPUT = {  # two errors, one of them inside a $ref'd array item
    "path": "src/app/main.py",
    "mode": "delete",
    "edits": [{"old": "foo", "new": "bar"}, {"old": "x = 1"}],
}


def per_call_cases() -> dict[str, dict[str, Callable[[], Any]]]:
    """For each library: check a valid input, check an invalid one, and produce the error text
    for the invalid one (what norma does when it refuses a call)."""
    import fastjsonschema
    import jsonschema
    import jsonschema_rs

    rs = jsonschema_rs.Draft202012Validator(TOOL_SCHEMA)
    py = jsonschema.Draft202012Validator(TOOL_SCHEMA)
    fast = fastjsonschema.compile(TOOL_SCHEMA, use_default=False)

    def fast_ok(instance: Any) -> bool:
        try:
            fast(instance)
        except fastjsonschema.JsonSchemaValueException:
            return False
        return True

    def fast_msgs(instance: Any) -> list[str]:
        try:
            fast(instance)
        except fastjsonschema.JsonSchemaValueException as exc:
            return [exc.message]  # fastjsonschema stops at the first error
        return []

    assert rs.is_valid(VALID_INPUT) and py.is_valid(VALID_INPUT) and fast_ok(VALID_INPUT)
    assert not (rs.is_valid(INVALID_INPUT) or py.is_valid(INVALID_INPUT) or fast_ok(INVALID_INPUT))
    return {
        "jsonschema-rs": {
            "valid": lambda: rs.is_valid(VALID_INPUT),
            "invalid": lambda: rs.is_valid(INVALID_INPUT),
            "errors": lambda: [e.message for e in rs.iter_errors(INVALID_INPUT)],
        },
        "jsonschema": {
            "valid": lambda: py.is_valid(VALID_INPUT),
            "invalid": lambda: py.is_valid(INVALID_INPUT),
            "errors": lambda: [e.message for e in py.iter_errors(INVALID_INPUT)],
        },
        "fastjsonschema": {
            "valid": lambda: fast_ok(VALID_INPUT),
            "invalid": lambda: fast_ok(INVALID_INPUT),
            "errors": lambda: fast_msgs(INVALID_INPUT),
        },
    }


def compile_cases() -> dict[str, Callable[[], Any]]:
    import fastjsonschema
    import jsonschema
    import jsonschema_rs

    return {
        "jsonschema-rs": lambda: jsonschema_rs.Draft202012Validator(TOOL_SCHEMA),
        # python-jsonschema compiles lazily; check_schema is what a careful caller does up front.
        "jsonschema": lambda: (
            jsonschema.Draft202012Validator.check_schema(TOOL_SCHEMA),
            jsonschema.Draft202012Validator(TOOL_SCHEMA),
        ),
        "fastjsonschema": lambda: fastjsonschema.compile(TOOL_SCHEMA, use_default=False),
    }


def median_ns(fn: Callable[[], Any], repeats: int, budget_s: float) -> float:
    """Median per-call nanoseconds over `repeats` timed loops of about `budget_s` each."""
    t0 = time.perf_counter_ns()
    fn()
    once = max(time.perf_counter_ns() - t0, 1)
    n = max(1, int(budget_s * 1e9 / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter_ns() - start) / n)
    return statistics.median(samples)


# --------------------------------------------------------------------------- import cost


def import_cost_ms(module: str, runs: int) -> tuple[float, float]:
    """(wall ms of `import module` minus an empty interpreter, -X importtime cumulative ms)."""

    def wall(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        return time.perf_counter() - start

    base = statistics.median(wall("pass") for _ in range(runs))
    with_mod = statistics.median(wall(f"import {module}") for _ in range(runs))
    cumulative = []
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            check=True,
            capture_output=True,
            text=True,
        )
        for line in proc.stderr.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] == module:
                cumulative.append(int(parts[1]) / 1000)
    return (with_mod - base) * 1000, statistics.median(cumulative) if cumulative else float("nan")


# --------------------------------------------------------------------------- report


def versions() -> dict[str, str]:
    from importlib.metadata import version

    dist = {
        "jsonschema-rs": "jsonschema_rs",
        "jsonschema": "jsonschema",
        "fastjsonschema": "fastjsonschema",
    }
    return {lib: version(d) for lib, d in dist.items()}


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    args = ap.parse_args()
    repeats, budget, import_runs = (3, 0.02, 3) if args.quick else (7, 0.1, 7)

    vers = versions()
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpu")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))

    print("\n(a) JSON-Schema-Test-Suite, draft2020-12")
    root = locate_suite()
    compliance: dict[str, dict[str, Tally]] = {}
    if root is not None:
        print(
            f"  suite: {root.relative_to(HERE.parent)} (from the {SUITE_SDIST[0]} {SUITE_SDIST[1]} sdist)"
        )
        for lib in LIBS:
            start = time.perf_counter()
            compliance[lib] = run_compliance(root, lib)
            print(f"  {lib}: ran in {time.perf_counter() - start:.1f}s")
        served = len(Remotes(root).docs)
        print(
            f"  remotes: {served} documents from remotes/ served via each library's retrieval hook;"
        )
        print(
            "  (a library asking for a URI outside that set is reported below; no other test is skipped)"
        )
        print(
            f"\n  {'library':<15} {'part':<9} {'pass':>5} {'fail':>5} {'raised':>6} {'total':>6} {'pass %':>7}"
        )
        for lib in LIBS:
            for part, t in compliance[lib].items():
                pct = 100 * t.passed / t.total if t.total else 0.0
                print(
                    f"  {lib:<15} {part:<9} {t.passed:>5} {t.failed:>5} {t.errored:>6}"
                    f" {t.total:>6} {pct:>6.1f}%"
                )
        for lib in LIBS:
            for part, t in compliance[lib].items():
                bad = t.failed_by_file + t.errored_by_file
                if bad:
                    worst = ", ".join(
                        f"{f.removesuffix('.json')} {n}" for f, n in bad.most_common(12)
                    )
                    print(f"  {lib} {part} failed or raised, by file: {worst}")

    print("\n(b) per-call cost on a realistic tool schema (compiled once), median ns")
    cases = per_call_cases()
    per_call: dict[str, dict[str, float]] = {}
    for lib in LIBS:
        per_call[lib] = {k: median_ns(fn, repeats, budget) for k, fn in cases[lib].items()}
    comp = {lib: median_ns(fn, repeats, budget) for lib, fn in compile_cases().items()}
    print(f"  {'library':<15} {'valid':>10} {'invalid':>10} {'errors':>10} {'compile':>12}")
    base = per_call["jsonschema-rs"]
    for lib in LIBS:
        p = per_call[lib]
        print(
            f"  {lib:<15} {p['valid']:>10.0f} {p['invalid']:>10.0f} {p['errors']:>10.0f} {comp[lib]:>12.0f}"
            f"   ({ratio(p['valid'], base['valid'])}, {ratio(p['invalid'], base['invalid'])},"
            f" {ratio(p['errors'], base['errors'])}, {ratio(comp[lib], comp['jsonschema-rs'])})"
        )

    print(f"\n(c) import cost, fresh interpreter, median of {import_runs}")
    imports = {lib: import_cost_ms(MODULES[lib], import_runs) for lib in LIBS}
    for lib in LIBS:
        wall, cum = imports[lib]
        print(
            f"  {lib:<15} wall +{wall:6.1f} ms   importtime {cum:6.1f} ms   "
            f"({ratio(wall, imports['jsonschema-rs'][0])} wall)"
        )

    print("\nsummary (ratios against jsonschema-rs)")
    header = "| library | version | 2020-12 required pass | optional pass | valid ns | invalid ns | errors ns | compile ns | import ms |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for lib in LIBS:
        req = compliance.get(lib, {}).get("required")
        opt = compliance.get(lib, {}).get("optional")

        def cell(t: Tally | None) -> str:
            if t is None:
                return "skipped"
            return f"{t.passed}/{t.total} ({100 * t.passed / t.total:.1f}%)"

        p = per_call[lib]
        print(
            f"| {lib} | {vers[lib]} | {cell(req)} | {cell(opt)} "
            f"| {p['valid']:.0f} ({ratio(p['valid'], base['valid'])}) "
            f"| {p['invalid']:.0f} ({ratio(p['invalid'], base['invalid'])}) "
            f"| {p['errors']:.0f} ({ratio(p['errors'], base['errors'])}) "
            f"| {comp[lib]:.0f} ({ratio(comp[lib], comp['jsonschema-rs'])}) "
            f"| {imports[lib][0]:.1f} ({ratio(imports[lib][0], imports['jsonschema-rs'][0])}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
