"""The shape of the packages: import graph and who may change an actor's state.

The import graph is read from the source with `ast` (nothing is imported):
module-level imports are runtime edges, imports under ``if TYPE_CHECKING:``
are annotation-only edges, and imports inside functions are listed apart.

The drawing of `actors/` in docs/structure.md is made from the same graph
(`python -m tests.project.test_structure` writes it again); a test fails when it
differs from the code, and no drawing can be made of a graph with a circle.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "storage")

# Function-level imports inside a package that are there for a reason other
# than a cycle: module -> imported module, with the reason.
LAZY_ALLOWED = {
    ("storage", "storage._postgres"): "PostgresJournal needs the optional 'postgres' extra",
    (
        "actors._tools._cli._web",
        "actors._tools._web",
    ): "the web inspector needs the optional 'web' extra",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The modules of ours that an import statement loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # "from . import _saga" loads the module _saga; "from .x import y" loads .x
        names = [
            f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in MODULES else prefix
            for alias in node.names
        ]
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name not in found:
            found.append(name)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """(runtime edges, TYPE_CHECKING edges, function-level edges) by module."""
    runtime: dict[str, set[str]] = {m: set() for m in MODULES}
    typing_only: dict[str, set[str]] = {m: set() for m in MODULES}
    lazy: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"

        def visit(statements: list[ast.stmt], edges: dict[str, set[str]]) -> None:
            for node in statements:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    edges[module].update(_targets(node, module, is_package))
                elif isinstance(node, ast.If):
                    visit(node.body, typing_only if _is_type_checking(node.test) else edges)
                    visit(node.orelse, edges)
                elif isinstance(node, ast.Try):
                    for block in (node.body, node.orelse, node.finalbody):
                        visit(block, edges)
                    for handler in node.handlers:
                        visit(handler.body, edges)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    for inner in ast.walk(node):
                        if isinstance(inner, (ast.Import, ast.ImportFrom)):
                            lazy[module].update(_targets(inner, module, is_package))

        visit(tree.body, runtime)
    for edges in (runtime, typing_only, lazy):
        for module in edges:
            edges[module].discard(module)
    return runtime, typing_only, lazy


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path start -> ... -> goal along ``edges``, or None."""
    stack = [(start, [start])]
    seen = {start}
    while stack:
        node, path = stack.pop()
        for nxt in sorted(edges.get(node, ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def _package(module: str) -> str:
    return module.split(".")[0]


def test_the_graph_sees_the_modules_and_their_imports():
    # A guard for the tests below: the parser must find real edges.
    runtime, _, _ = _graph()
    assert {
        "actors._actor._instance",
        "actors._kernel._mailbox",
        "actors._kernel._driver",
        "storage._lmdb._journal",
    } <= set(MODULES)
    assert "actors._kernel._mailbox" in runtime["actors._actor._instance"]
    assert (
        "actors._kernel._effects" in runtime["actors._actor._context"]
    )  # "from . import _effects as fx"
    assert "storage._journal" in runtime["storage._lmdb._journal"]


def test_no_runtime_import_cycle():
    runtime, _, _ = _graph()
    cycles = []
    for module in sorted(runtime):
        for target in sorted(runtime[module]):
            back = _reaches(runtime, target, module)
            if back is not None:
                cycles.append(" -> ".join([module, *back]))
    assert [] == cycles


def test_type_checking_imports_never_close_a_cycle():
    # An annotation-only import is fine where nothing imports the importer
    # back; otherwise the shared piece belongs a floor down (or in a Protocol).
    runtime, typing_only, _ = _graph()
    closing = []
    for module in sorted(typing_only):
        for target in sorted(typing_only[module]):
            back = _reaches(runtime, target, module)
            if back is not None:
                closing.append(f"{module} -> {' -> '.join(back)}")
    assert [] == closing


def test_no_function_level_import_within_a_package():
    _, _, lazy = _graph()
    found = sorted(
        (module, target)
        for module, targets in lazy.items()
        for target in targets
        if _package(module) == _package(target) and (module, target) not in LAZY_ALLOWED
    )
    assert [] == found


def _imports() -> list[tuple[str, str]]:
    """(module, module it imports) over every import: at run time, for
    type checkers only, or in a function."""
    return sorted(
        (module, target)
        for edges in _graph()
        for module, targets in edges.items()
        for target in targets
    )


def test_storage_never_imports_actors():
    found = [
        (module, target)
        for module, target in _imports()
        if _package(module) == "storage" and _package(target) == "actors"
    ]
    assert [] == found


# The tools outside an application (the command line, the web inspector)
# reach the runtime through one module, actors._tools._admin; the control socket's
# server calls the public methods of an Operations (defined in _control), and
# its frames and socket modules are its own.
TOOL_PACKAGES = ("actors._tools._cli", "actors._tools._web")
TOOLS_MAY_IMPORT = {"actors._tools._admin", "actors.errors", *TOOL_PACKAGES}
CONTROL_MAY_IMPORT = {
    "actors._kernel._values",
    "actors.errors",
    "actors._system._control_frames",
    "actors._system._control_socket",
}


def _in(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_tools_reach_the_runtime_through_the_admin_api():
    found = [
        (module, target)
        for module, target in _imports()
        if _package(target) == "actors"
        and (
            (_in(module, TOOL_PACKAGES) and not _in(target, TOOLS_MAY_IMPORT))
            or (module == "actors._system._control" and target not in CONTROL_MAY_IMPORT)
        )
    ]
    assert [] == found
    # ... and the guard sees the tools' imports
    assert ("actors._tools._cli._write", "actors._tools._admin") in _imports()


# The actor's own modules; everyone else calls its methods. (_runner steps
# an actor parked without a task: the actor's own stepping, beside the
# task that runs it.)
ACTOR_OWN = {
    "_instance.py",
    "_ends.py",
    "_arrivals.py",
    "_writes.py",
    "_mailbox.py",
    "_driver.py",
    "_runner.py",
}
WRITES = [
    re.compile(r"\bactor\.[a-z_]+\s*[-+|&]?=(?!=)"),
    re.compile(r"\bactor\.[a-z_]+\.(append|pop|add|remove|update|clear|extend|sort|setdefault)\("),
    re.compile(r"\bactor\.[a-z_]+\[[^\]]*\]\s*=(?!=)"),
]


def test_no_module_writes_an_actors_state():
    found = []
    for path in sorted((ROOT / "actors").rglob("*.py")):
        if path.name in ACTOR_OWN:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(pattern.search(line) for pattern in WRITES):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert [] == found


def test_the_write_patterns_catch_writes():
    # A guard: the patterns above do match the writes they forbid.
    samples = [
        "actor.busy += 1",
        "actor.waits.append(w)",
        "actor.record['x'] = 1",
        "actor.status = 'running'",
    ]
    assert [True] * len(samples) == [any(p.search(s) for p in WRITES) for s in samples]
    assert not any(p.search("if actor.status == 'running':") for p in WRITES)


# -- the rooms ---------------------------------------------------------------------

# The rooms of actors/, bottom up: a module imports (at run time, for type
# checkers, or in a function) only from its own room or rooms below it.
# `errors` is under them all; the public namespace, `testing` and the
# command line's entry point stand on top.
ROOMS = ("_kernel", "_features", "_actor", "_system", "_tools")
ROOM_DOCS = {
    "_kernel": "effects, the driver that runs a process by hand, the log, records, the mailbox, "
    "handles, the journal transactions the runtime writes",
    "_features": "steps, sends, signals, asks, timers, streams, sagas, queues, schedules, "
    "supervision, joins, crashes",
    "_actor": "an instance (Actor) and its parts, the process's ctx",
    "_system": "the ActorSystem facade and its parts, open and recovery, the operations "
    "(fork, retry, mail, cleanup), nodes, the control socket",
    "_tools": "the command line, the web inspector, the admin API they go through, "
    "history files, the simulation",
}


def room_of(module: str) -> str:
    """The room of a module of actors ("" for the package's top level)."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in ROOMS else ""


def _rank(module: str) -> int:
    room = room_of(module)
    if room:
        return ROOMS.index(room)
    return -1 if module == "actors.errors" else len(ROOMS)


def test_no_arrow_runs_back_up_between_rooms():
    found = [
        f"{module} -> {target}"
        for module, target in _imports()
        if _package(module) == _package(target) == "actors" and _rank(target) > _rank(module)
    ]
    assert [] == found
    # ... and every module of actors/ but the public ones is in a room
    loose = [
        m
        for m in MODULES
        if _package(m) == "actors" and not room_of(m) and m.count(".") and m not in _PUBLIC
    ]
    assert [] == loose


_PUBLIC = {"actors.errors", "actors.testing", "actors.__main__"}


def test_every_module_fits_a_reader():
    # One concept, one place: no module of ours over MAX_LINES, but the
    # ones listed, none longer than it was when listed.
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in MODULES.values()
    }
    grown = {p: n for p, n in lengths.items() if n > LONG_MODULES.get(p, MAX_LINES)}
    assert {} == grown, "a module grew past its allowance: split it by job"
    stale = [p for p, n in LONG_MODULES.items() if lengths.get(p, 0) <= MAX_LINES]
    assert [] == stale, "split under the limit: take it off LONG_MODULES"


MAX_LINES = 450
# Modules still over MAX_LINES, with their length: each is to be split (the
# test fails when one grows, or shrinks under the limit and stays listed).
LONG_MODULES: dict[str, int] = {}


def draw_rooms() -> str:
    """The rooms, top down, with what each holds and the rooms it imports."""
    runtime, _, _ = _graph()
    lines = [
        "The rooms of `actors/`, top down: a room imports only from rooms below",
        "it (`test_no_arrow_runs_back_up_between_rooms`).",
        "",
        "```text",
    ]
    for room in reversed(ROOMS):
        members = [m for m in MODULES if room_of(m) == room]
        below = sorted(
            {room_of(t) or t for m in members for t in runtime[m] if _package(t) == "actors"}
            - {room}
        )
        lines.append(f"{room:10} {len(members):2} modules  <- {', '.join(below) or '-'}")
        lines.append(f"{'':10} {ROOM_DOCS[room]}")
    lines += ["```", ""]
    return "\n".join(lines)


# -- the drawing -------------------------------------------------------------------

DRAWING = ROOT / "docs" / "structure.md"
_DRAWING_HEAD = """# Structure

`actors/` is five rooms on top of each other, and the public modules
(`actors`, `actors.errors`, `actors.testing`) around them. A room imports
only from itself and the rooms below it; inside a room, a module imports
(at run time) only modules on floors below its own, so the graph has no
circle. Everything may import `storage`, which never imports `actors`.
Made from the source by `python -m tests.project.test_structure`;
`tests/project/test_structure.py` fails when it differs from the code.
"""


def _floors(package: str = "actors") -> dict[str, int]:
    """Each module of ``package`` -> its floor: one above the highest floor
    it imports from (0 for none). Raises ValueError naming a circle."""
    runtime, _, _ = _graph()
    inside = {
        m: {t for t in runtime[m] if _package(t) == package}
        for m in MODULES
        if _package(m) == package
    }
    floors: dict[str, int] = {}
    while len(floors) < len(inside):
        ready = [m for m in inside if m not in floors and inside[m] <= floors.keys()]
        if not ready:
            stuck = sorted(m for m in inside if m not in floors)
            raise ValueError(f"no floor for {stuck}: they import each other in a circle")
        for m in ready:
            floors[m] = 1 + max((floors[t] for t in inside[m]), default=-1)
    return floors


def _room_floors(room: str, package: str = "actors") -> dict[str, int]:
    """Each module of ``room`` -> its floor within the room (by its imports
    of the room's own modules)."""
    runtime, _, _ = _graph()
    inside = {
        m: {t for t in runtime[m] if room_of(t) == room}
        for m in _floors(package)
        if room_of(m) == room
    }
    found: dict[str, int] = {}
    while len(found) < len(inside):
        for m in sorted(inside):
            if m not in found and inside[m] <= found.keys():
                found[m] = 1 + max((found[t] for t in inside[m]), default=-1)
    return found


def draw(package: str = "actors") -> str:
    """The drawing: the rooms top down, each with its floors, then what
    each module imports."""
    runtime, _, _ = _graph()
    floors = _floors(package)

    def short(module: str) -> str:
        return module[len(package) + 1 :] or package

    local_floors = _room_floors

    lines = [_DRAWING_HEAD, draw_rooms(), "Each room's modules, floor by floor:", "", "```text"]
    outside = sorted(short(m) for m in floors if not room_of(m))
    lines.append(f"{'(public)':12} {'  '.join(outside)}")
    for room in reversed(ROOMS):
        local = local_floors(room)
        for floor in range(max(local.values()), -1, -1):
            names = sorted(short(m)[len(room) + 1 :] or "." for m, f in local.items() if f == floor)
            label = room if floor == max(local.values()) else ""
            lines.append(f"{label:10} {floor:2} {'  '.join(names)}")
    lines += ["```", "", "What each module imports from `actors` (at run time):", "", "```text"]
    for module in sorted(floors, key=lambda m: (_rank(m), m), reverse=True):
        targets = sorted(short(t) for t in runtime[module] if _package(t) == package)
        lines.append(f"{short(module):30} <- {', '.join(targets) or '-'}")
    lines += ["```", ""]
    return "\n".join(lines)


# The parts of ActorSystem (see actors/_system/_facade.py): attribute -> (module, class).
PARTS = {
    "registry": ("_system._registry", "Registry"),
    "statuses": ("_system._status_watch", "Statuses"),
    "corruption": ("_system._troubles", "Corruption"),
    "stalls": ("_system._troubles", "Stalls"),
    "router": ("_features._sending", "Router"),
    "lifecycle": ("_system._lifecycle", "Lifecycle"),
    "upkeep": ("_system._upkeep", "Upkeep"),
}


# The parts of Actor, made in _instance: part -> (module, class).
ACTOR_PARTS = {
    "writes": ("_actor._writes", "Writes"),
    "arrivals": ("_actor._arrivals", "Arrivals"),
    "ends": ("_actor._ends", "Ends"),
}


def part_callers(
    root: Path = ROOT, parts: dict[str, tuple[str, str]] = PARTS, owner: str = "system"
) -> dict[str, dict[str, list[str]]]:
    """For each of ``parts`` (of ActorSystem, reached as ``system.<part>``,
    or of Actor, as ``actor.<part>``), the modules of ``actors`` (CLI and
    web included) that call it, each with the members they use."""
    names = "system|self" if owner == "system" else "actor|self|parent|receiver|host"
    pattern = re.compile(rf"\b(?:{names})\.(" + "|".join(parts) + r")\.([A-Za-z_]\w*)")
    found: dict[str, dict[str, set[str]]] = {part: {} for part in parts}
    for path in sorted((root / "actors").rglob("*.py")):
        module = ".".join(path.relative_to(root / "actors").with_suffix("").parts)
        for part, member in pattern.findall(path.read_text()):
            if module != parts[part][0]:
                found[part].setdefault(module, set()).add(member)
    return {p: {m: sorted(ms) for m, ms in sorted(c.items())} for p, c in found.items()}


def draw_parts(root: Path = ROOT) -> str:
    lines = [
        "Who calls whom: `ActorSystem` (`_system._facade`) is a facade over its parts.",
        "The parts are handed the parts they call as the system is made; the actors,",
        "the handles, the features and the asks reach them through the system",
        "(`system.registry`, ...), typed by the protocols in `_interfaces`. Each part,",
        "then the modules that call it:",
        "",
        "```text",
    ]

    def draw(parts: dict[str, tuple[str, str]], owner: str) -> None:
        for part, callers in part_callers(root, parts, owner).items():
            module, cls = parts[part]
            lines.append(f"{part} ({cls}, {module})")
            for caller, members in callers.items():
                lines.append(f"  <- {caller:16} {', '.join(members)}")

    draw(PARTS, "system")
    lines += [
        "```",
        "",
        "`Actor` (`_actor._instance`) owns three parts in the same way, each made with",
        "the actor (`actor.writes`, ...):",
        "",
        "```text",
    ]
    draw(ACTOR_PARTS, "actor")
    lines += ["```", ""]
    return "\n".join(lines)


def test_the_parts_are_what_the_system_and_the_actor_make():
    for owner, parts in (("_system/_facade", PARTS), ("_actor/_instance", ACTOR_PARTS)):
        source = (ROOT / "actors" / f"{owner}.py").read_text()
        room = owner.partition("/")[0]
        for part, (module, cls) in parts.items():
            here, _, leaf = module.partition(".")
            where = f".{leaf}" if here == room else f"..{module}"
            assert re.search(rf"self\.{part}(?:: \w+)? = (?:\w+ = )?{cls}\(", source), part
            assert re.search(rf"^from {re.escape(where)} import .*\b{cls}\b", source, re.M), part


def test_no_protocol_has_private_members():
    private, seen = [], []
    for path in sorted((ROOT / "actors").rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(cls, ast.ClassDef)
                and any(ast.unparse(base).endswith("Protocol") for base in cls.bases)
            ):
                continue
            seen.append(cls.name)
            for node in cls.body:
                name = (
                    node.name
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    else node.target.id
                    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    else ""
                )
                if name.startswith("_") and not name.startswith("__"):
                    private.append(f"{path.name}:{cls.name}.{name}")
    assert {"SystemAPI", "RegistryAPI", "ActorAPI", "Host", "Operations"} <= set(seen)
    assert [] == private


def test_no_class_is_assembled_from_three_of_our_bases():
    ours = set()
    classes = []
    for path in sorted((ROOT / "actors").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                ours.add(node.name)
                classes.append((path.name, node))
    many = [
        f"{name}:{node.name}"
        for name, node in classes
        if sum(isinstance(b, ast.Name) and b.id in ours for b in node.bases) >= 3
    ]
    assert [] == many


def drawing() -> str:
    """docs/structure.md, made from the code."""
    return draw() + "\n" + draw_parts() + "\n" + draw_features()


def test_the_drawing_of_actors_is_the_code():
    assert drawing() == DRAWING.read_text(), (
        "docs/structure.md differs from the import graph: run python -m tests.project.test_structure"
    )


def test_a_circle_has_no_floors(monkeypatch):
    # A guard: the drawing cannot be made of a graph with a circle.
    runtime, typing_only, lazy = _graph()
    bent = {m: set(t) for m, t in runtime.items()}
    bent["actors._kernel._driver"].add("actors._actor._instance")  # _instance imports _driver
    monkeypatch.setitem(globals(), "_graph", lambda: (bent, typing_only, lazy))
    try:
        _floors()
    except ValueError as exc:
        assert "actors._kernel._driver" in str(exc) and "actors._actor._instance" in str(exc)
    else:
        raise AssertionError("a circle was given floors")


MOST_FLOORS = 10  # a room's floors (#49: the tools stood on 14)


def test_every_room_stands_on_at_most_ten_floors():
    # A reader finds a module a few imports above its room's floor: a room
    # that grows taller wants what its modules share moved down.
    tall = {room: 1 + max(_room_floors(room).values()) for room in ROOMS}
    assert {} == {room: n for room, n in tall.items() if n > MOST_FLOORS}, (
        "a room grew past ten floors: move what its modules share down a floor"
    )


def test_no_code_dispatches_on_an_effects_class():
    # What a kind of effect does is its class's (attributes, methods, its
    # Behaviour): no module asks "is it a Call?" to decide.
    dispatch = re.compile(r"\btype\([^)]*\) is (not )?(fx\.|_effects\.)?[A-Z]\w*\b")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "actors").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if dispatch.search(line) and "fx." in line
    ]
    assert [] == found
    assert dispatch.search("if type(effect) is fx.Call:")  # (the pattern finds one)


def test_every_leaf_effect_runs_live_by_a_row_of_the_wiring():
    # The actor starts and stops a leaf through its kind's behaviour, which
    # the system's wiring names (actors/_system/_wiring.py, LIVE); a kind
    # without a row would fail only when a process first awaited it.
    import actors  # noqa: F401 - every effect kind, imported
    from actors._kernel import _effects as fx
    from actors._system import _wiring

    def kinds(cls: type) -> list[type]:
        return [cls, *(k for sub in cls.__subclasses__() for k in kinds(sub))]

    # Answered when made or by the driver, never started live: a recorded
    # value, a patch marker, continue-as-new; composites settle from their leaves.
    never_live = {fx.Recorded, fx.Marker, fx.ContinueAsNew, *kinds(fx.Composite)}
    leaves = [k for k in kinds(fx.Effect) if k is not fx.Effect and k not in never_live]
    assert len(leaves) >= 12, leaves
    rows = [kind for kind, _ in _wiring.LIVE]
    assert len(rows) == len(set(rows)), rows  # one row per kind
    unwired = [k.__name__ for k in leaves if k not in rows]
    assert not unwired, f"no row in actors/_system/_wiring.py's LIVE for {unwired}"
    assert set(leaves) == set(rows)  # (and no row for a kind that never runs live)
    for kind, behaviour in _wiring.LIVE:
        assert issubclass(behaviour, fx.Behaviour), kind
        assert behaviour.start is not fx.Behaviour.start, kind  # it can begin
    from actors._features._asks import Asks

    wired = _wiring.wire(Asks(None)).behaviours  # (a service only kept: no system needed)
    assert wired.keys() == dict(_wiring.LIVE).keys()
    for kind, behaviour in _wiring.LIVE:  # the class, or one made with a service
        assert wired[kind] is behaviour or type(wired[kind]) is behaviour, kind


# A decorator at a module's top level runs at import. These only build what
# they decorate; one that registers it somewhere (as `fx.runs_live` and
# `_hooks.on_run_end` did) would make what runs depend on what was imported:
# the system wires its features when it is built (actors/_system/_wiring.py).
IMPORT_DECORATORS = {
    "attrs.frozen",
    "attrs.define",
    "contextmanager",
    "asynccontextmanager",
    "overload",
}


def test_nothing_registers_itself_at_import():
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: @{name}"
        for path in sorted((ROOT / "actors").rglob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        for decorator in node.decorator_list
        if (name := ast.unparse(getattr(decorator, "func", decorator))) not in IMPORT_DECORATORS
    ]
    assert [] == found


def test_importing_the_runtime_imports_no_test_tools():
    # trio.testing imports pytest where it is installed: ~60 ms at import and
    # ~10,000 more objects that every full garbage collection walks.
    code = "import sys, actors, storage; print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', 'hypothesis') or m == 'trio.testing'))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


# -- where each feature lives ------------------------------------------------------

# A runtime module names a feature's machinery when it imports the feature's
# module or uses one of its identifiers (a class, an effect kind, the
# system's attribute that holds its service, a helper): any name, attribute,
# imported name, keyword or definition that matches. Docstrings and comments
# do not count. The CLI and the web inspector are outside the count, and so
# is _admin, the one module through which they reach the runtime: it names
# what the tools use of each feature (that they used directly before it).
FEATURES: dict[str, tuple[str, str]] = {
    "asks": (
        "_features._asks",
        r"_?asks?|Asks?|Asker|asker|Reply|replies|ask_id_of|answer(_offline)?|no_reply"
        r"|send_reply|unanswered_on_disk|reply_outcome|reply_to",
    ),
    "keyed sends": ("_features._sends", r"KeyedSends|KEY_PREFIX|legacy_key\w*|keyed|\.keys"),
    "queues": (
        "_features._queues",
        r"Queue\w*|_?queues?|queued|queue_\w+|held_key|wait_prefix|index_key"
        r"|waiting_rows|Rate|admitted|_run_admitted",
    ),
    "schedules": (
        "_features._schedules",
        r"Schedule\w*|_?schedules|schedule_\w+|due_ticks|ticks_after",
    ),
    "sagas": ("_features._saga", r"\w*(compensat|Compensat|saga)\w*"),
    "streams": (
        "_features._streams",
        r"Stream\w*|Emit|Publish|_?emit\w*|_?publish\w*|_?exports?|_?cursors?|Cursor\w*",
    ),
    "patches": ("", r"_?patch(ed|es|_id)?|Marker|deprecate_patch"),
    "cancel": (
        "_system._lifecycle",
        r"Cancels|Cancel|ProcessCancelled|_cancel\w*|cancel_(?!scope|timer)\w+|record_cancel"
        r"|compensate_on_cancel",
    ),
}
# The tools outside the runtime and their way in (not counted as feature homes).
TOOLS_OUTSIDE = ("_tools._cli", "_tools._web", "_tools._admin")
# Called as methods these names are someone else's (dict.keys, trio's
# CancelScope.cancel, a journal reader's cursor).
_CALLED_ELSEWHERE = {"keys", "cancel", "cursor"}


def _identifiers(tree: ast.AST) -> set[str]:
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):  # as ".name"
            if not (node.attr in _CALLED_ELSEWHERE and id(node) in called):
                found.add("." + node.attr)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).rpartition(".")[2])
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
    return found


def _names(pattern: str, name: str) -> bool:
    """``name`` is one of ``pattern``'s; an attribute (".name") is matched
    with its dot (patterns that only mean an attribute start with one) and
    without it."""
    return bool(
        re.fullmatch(pattern, name) or (name[:1] == "." and re.fullmatch(pattern, name[1:]))
    )


def feature_modules(root: Path = ROOT) -> dict[str, list[str]]:
    """Each feature -> the runtime modules of ``actors/`` (under ``root``)
    that name its machinery."""
    found: dict[str, list[str]] = {name: [] for name in FEATURES}
    for path in sorted((root / "actors").rglob("*.py")):
        module = ".".join(path.relative_to(root / "actors").with_suffix("").parts)
        # (the package's __init__ only re-exports the public names)
        if module in ("__main__", "__init__") or module.startswith(TOOLS_OUTSIDE):
            continue
        tree = ast.parse(path.read_text(), str(path))
        names = _identifiers(tree)
        imported = {
            alias.name.rpartition(".")[2]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        } | {
            (node.module or "").rpartition(".")[2]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        for feature, (own, pattern) in FEATURES.items():
            own_module = own and (module == own or own.rpartition(".")[2] in imported)
            if own_module or any(_names(pattern, name) for name in names):
                found[feature].append(module)
    return found


def draw_features(root: Path = ROOT) -> str:
    lines = [
        "Where each feature lives: the runtime modules (outside the CLI, the web",
        "inspector and `_admin`, their way in) that import its module or use one of its identifiers",
        "(`FEATURES` in `tests/project/test_structure.py` lists them):",
        "",
        "```text",
    ]
    for feature, modules in feature_modules(root).items():
        lines.append(f"{feature:12} {len(modules):2}  {', '.join(modules)}")
    lines += ["```", ""]
    return "\n".join(lines)


def test_the_feature_count_sees_each_feature():
    # A guard: each feature's own module names it, and a module that only
    # calls dict.keys() or a cancel scope's cancel() names nothing.
    found = feature_modules()
    for feature, (own, _) in FEATURES.items():
        assert found[feature], feature
        if own:
            assert own in found[feature], feature
    names = _identifiers(ast.parse("d.keys(); scope.cancel(); keys = 1"))
    assert not any(_names(FEATURES[f][1], n) for f in ("keyed sends", "cancel") for n in names)
    assert _names(FEATURES["keyed sends"][1], ".keys")


# The modules that may name the queues' machinery (the target is 5): their
# own two, and the public calls that take a queue, each with why. A module
# that starts naming queues fails the test; one that stops must leave the list.
QUEUE_MODULES = {
    "_features._queues": "the service, its pumps and a queued start's gate",
    "_features._queue_state": "a queue's definition, its rows and what a round reads",
    "_system._facade": "start(queue=, priority=), queue_info and the service it builds",
    "_system._open": "open_system(queues=...)",
    "_actor._ctx_children": "ctx.call/spawn/scope(queue=, priority=)",
}


def test_the_queues_machinery_stays_in_its_modules():
    found = set(feature_modules()["queues"])
    assert set() == found - set(QUEUE_MODULES), "queue code outside its modules: move it there"
    assert set() == set(QUEUE_MODULES) - found, "no longer names queues: take it off QUEUE_MODULES"


# The modules that may name the ask machinery (the target is 5): the
# service and its forms, the public calls, and the wiring, each with why. A
# module that starts naming asks fails the test; one that stops must leave
# the list. The kernel carries an asked message's asker as the message's
# *extra*, opaque (actors/_kernel/_mailbox.py), except where the journal's
# own name for it is read: storage's `LogEntry.ask`, kept as stored.
ASK_MODULES = {
    "_features._asks": "the service: system asks in flight, answers, what a run's end owes",
    "_features._ask_forms": "the effects Ask and Reply, the asker's stored form, on-disk answers",
    "_system._facade": "ActorSystem.ask, and the service it builds and wires",
    "_actor._ctx_messages": "ctx.ask and ctx.reply",
    "_system._wiring": "the features wired in one place: the ask's behaviours and end hooks",
    "_kernel._leaves": "a wait's log entry keeps the extra it took in storage's LogEntry.ask",
}


def test_the_ask_machinery_stays_in_its_modules():
    found = set(feature_modules()["asks"])
    assert set() == found - set(ASK_MODULES), "ask code outside its modules: move it there"
    assert set() == set(ASK_MODULES) - found, "no longer names asks: take it off ASK_MODULES"


# -- module-level state ---------------------------------------------------------------

# Calls that make a mutable container, by the name called (``weakref.WeakSet()``
# counts by its last part). (A ``threading.local`` is not one: what it holds is
# each thread's own, as a run's context is.)
_CONTAINERS = frozenset(
    [
        "dict",
        "list",
        "set",
        "bytearray",
        "defaultdict",
        "OrderedDict",
        "Counter",
        "deque",
        "WeakKeyDictionary",
        "WeakValueDictionary",
        "WeakSet",
    ]
)
# Methods that change a container in place.
_MUTATORS = frozenset(
    [
        "append",
        "appendleft",
        "extend",
        "insert",
        "add",
        "update",
        "setdefault",
        "pop",
        "popitem",
        "popleft",
        "remove",
        "discard",
        "clear",
        "move_to_end",
        "sort",
        "reverse",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
    ]
)
# The module-level state a function may change: (module, name) -> why it is
# process-wide.
STATE_ALLOWED = {
    ("storage._codec", "_registry"): "@actors.serializable registers a class for the "
    "whole process, by design: a value's class is found by its name in any journal",
    ("storage._codec", "_names"): "(the same registry, by class)",
    ("storage._codec", "_fields"): "(the same registry: the fields each class stores)",
    ("storage._codec", "_aliases"): "(the same registry: the fields' old names)",
    ("storage._codec", "_PACKERS"): "idle packers, scratch buffers reused: what the "
    "pool holds changes no result (and it is safe across threads)",
    ("storage._lmdb._journal", "_open_journals"): "a fork of the process is process-wide: "
    "os.register_at_fork must find every open LMDB environment",
}


def _mutable_value(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _CONTAINERS
    return False


def _module_state(tree: ast.Module) -> set[str]:
    """The names a module binds, at its top level (under an ``if`` or a
    ``try`` too), to a mutable container."""
    found: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.If, ast.Try)):
            body += node.body + node.orelse + getattr(node, "finalbody", [])
            body += [n for h in getattr(node, "handlers", []) for n in h.body]
        elif isinstance(node, ast.Assign) and _mutable_value(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.add(target.id)
        elif (
            isinstance(node, ast.AnnAssign)
            and _mutable_value(node.value)
            and isinstance(node.target, ast.Name)
        ):
            found.add(node.target.id)
    return found


def _changed_state(modules: dict[str, ast.Module]) -> set[tuple[str, str, str]]:
    """(module, name, how) of each module-level name that a function
    rebinds (``global``) or changes in place (an item set or deleted, a
    mutating method called), by its own name, as ``module.name`` from
    another module, or through a local alias of either."""
    state = {name: _module_state(tree) for name, tree in modules.items()}
    by_short: dict[str, list[str]] = {}
    for name in modules:
        by_short.setdefault(name.rpartition(".")[2], []).append(name)
    found: set[tuple[str, str, str]] = set()
    for module, tree in modules.items():
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            aliases: dict[str, tuple[str, str]] = {}

            def target(expr: ast.expr, module: str = module) -> tuple[str, str] | None:
                if isinstance(expr, ast.Name):
                    if expr.id in aliases:
                        return aliases[expr.id]
                    if expr.id in state[module]:
                        return module, expr.id
                elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
                    for owner in by_short.get(expr.value.id, ()):
                        if expr.attr in state[owner]:
                            return owner, expr.attr
                elif isinstance(expr, ast.Subscript):  # a container it holds
                    return target(expr.value)
                return None

            for node in ast.walk(func):
                if isinstance(node, ast.Global):
                    found.update((module, name, "global") for name in node.names)
                elif isinstance(node, ast.Assign):
                    pairs = [(t, node.value) for t in node.targets]
                    for t, v in list(pairs):
                        if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple):
                            pairs += list(zip(t.elts, v.elts, strict=False))
                    for t, v in pairs:
                        if isinstance(t, ast.Name) and (hit := target(v)) is not None:
                            aliases[t.id] = hit
                elif isinstance(node, ast.NamedExpr) and (hit := target(node.value)) is not None:
                    aliases[node.target.id] = hit
            for node in ast.walk(func):
                hit = None
                if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
                    hit, how = target(node.value), "item"
                elif isinstance(node, ast.AugAssign):
                    hit, how = target(node.target), "augmented"
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _MUTATORS
                ):
                    hit, how = target(node.func.value), f".{node.func.attr}()"
                if hit is not None:
                    found.add((*hit, how))
    return found


def _parsed() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def test_no_function_changes_module_level_state():
    # State lives on the system, its parts, an actor: a module-level table a
    # function changes is shared by every system of the process (two in one
    # test, a system and the command line) and outlives each.
    changed = {(module, name) for module, name, _ in _changed_state(_parsed())}
    assert sorted(changed - set(STATE_ALLOWED)) == []
    assert sorted(set(STATE_ALLOWED) - changed) == [], "no longer changed: take it off the list"


def test_the_state_scan_finds_changes():
    source = """
import weakref
TABLE = {}
CACHE: dict = dict()
SEEN = weakref.WeakSet()
COUNT = 0
FIXED = {"a": 1}
def f(x):
    TABLE[x] = 1
def g(x):
    seen, n = SEEN, 1
    seen.add(x)
def h():
    global COUNT
    COUNT += 1
async def k(x):
    if (c := CACHE) is not None:
        c.setdefault(x, 1)
def read(x):
    return FIXED[x], TABLE.get(x)
def pool():
    kept = POOLS[0]
    kept.append(1)
POOLS = [[], []]
"""
    other = "from . import one\ndef f(x):\n    del one.FIXED[x]\n"
    found = _changed_state({"p.one": ast.parse(source), "p.two": ast.parse(other)})
    assert {(m, n) for m, n, _ in found} == {
        ("p.one", "TABLE"),
        ("p.one", "SEEN"),
        ("p.one", "COUNT"),
        ("p.one", "CACHE"),
        ("p.one", "FIXED"),
        ("p.one", "POOLS"),
    }
    assert ("p.two", "COUNT", "global") not in found
    assert ("p.one", "COUNT", "global") in found


# -- the tests' rooms --------------------------------------------------------------

# tests/ mirrors the layout: a test module lives in the folder of what it
# tests (tests/README.md is the map), never at tests/ top, which holds the
# support modules (fixtures, helpers, child programs, the simulation).
TEST_ROOMS = {
    "kernel": "actors/_kernel",
    "features": "actors/_features",
    "actor": "actors/_actor",
    "system": "actors/_system",
    "tools": "actors/_tools and actors.testing",
    "journals": "storage/ (a folder named storage would shadow it for tests/'s scripts)",
    "whole": "the whole system under faults: SIGKILLs, several nodes, the nemesis, the simulation",
    "project": "the repository: structure, public API, typing, docs, examples, benchmarks",
}


def misplaced_tests(tests: Path) -> list[str]:
    """The test modules under ``tests`` that are not in a room's folder."""
    return sorted(
        str(path.relative_to(tests))
        for path in tests.rglob("test_*.py")
        if path.parent.parent != tests or path.parent.name not in TEST_ROOMS
    )


def test_every_test_module_lives_in_its_rooms_folder():
    tests = ROOT / "tests"
    assert [] == misplaced_tests(tests), "move it into the folder of what it tests"
    assert [] == [r for r in TEST_ROOMS if not (tests / r / "__init__.py").is_file()]
    # no folder takes a package's name: a script run from tests/ (a child
    # program) has tests/ first on sys.path, and would import the folder
    assert set() == set(TEST_ROOMS) & set(PACKAGES)
    # every room of actors/ has its folder, and the map names each folder
    assert set() == {r.lstrip("_") for r in ROOMS} - set(TEST_ROOMS)
    map_ = (tests / "README.md").read_text()
    assert [] == [r for r in TEST_ROOMS if f"`tests/{r}/`" not in map_]


def test_a_test_module_at_tests_top_is_misplaced(tmp_path):
    (tmp_path / "kernel" / "deeper").mkdir(parents=True)
    for name in ("test_top.py", "kernel/test_kept.py", "kernel/deeper/test_deep.py"):
        (tmp_path / name).touch()
    (tmp_path / "helpers.py").touch()
    assert ["kernel/deeper/test_deep.py", "test_top.py"] == misplaced_tests(tmp_path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--features"]:  # python -m tests.project.test_structure --features ROOT
        sys.stdout.write(draw_features(Path(sys.argv[2]) if sys.argv[2:] else ROOT))
    else:
        DRAWING.write_text(drawing())
        sys.stdout.write(f"wrote {DRAWING.relative_to(ROOT)}\n")
