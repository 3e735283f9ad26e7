"""Order a :class:`~ltdrnn.export.ir.Graph` into C loops and give every value its storage.

Both C dialects (float and integer) share this plan, so they differ only in how one value is computed:

- **units.** A unit is either one vector operation (``linear``, ``softmax``, ``combine``: its own loop over
  rows) or a *fused loop*: consecutive elementwise values of one length computed together, element by
  element, in one ``for (j ...)`` loop. Vector operations are scheduled as early as their inputs allow,
  so the elementwise work between them fuses into as few loops as possible.
- **storage.** A value lives in the input, the state, flash (a constant), a literal (a scalar), a view of
  another value (never stored), a scalar local inside its loop, or a stack buffer. An elementwise value
  needs a buffer only when something outside its loop reads it (a vector operation, a view, a later
  loop); buffers are reused once their value is dead, and a loop may write a value over a dying operand
  of the same length. A state write goes straight into the state when nothing reads the old state
  afterwards (and the loop reads it at the same element only); otherwise it is copied at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from .ir import ELEMENTWISE, Graph, StatePart, Value

VECTOR_OPS = ("linear", "softmax", "combine")
SOURCES = ("input", "state", "const", "scalar")


@dataclass
class Unit:
    """``kind``: ``"vector"`` (one value) or ``"loop"`` (fused elementwise values of length ``size``)."""

    kind: str
    values: List[Value]
    size: int


@dataclass
class Storage:
    """Where a value lives: ``kind`` in input, state, const, scalar, view, local, buffer, slot (its state
    part written in place); ``buffer`` names the stack array, ``part`` the state part."""

    kind: str
    buffer: Optional[str] = None
    part: Optional[StatePart] = None


@dataclass
class Plan:
    units: List[Unit]
    storage: Dict[int, Storage]
    buffers: Dict[str, int]  # stack array name -> length
    kinds: Dict[str, object] = field(default_factory=dict)  # stack array name -> its element kind
    copies: List[Tuple[str, StatePart, Value]] = field(default_factory=list)  # writes done after the loops

    def view_source(self, value: Value) -> Value:
        return value if value.op != "view" else self.view_source(value.args[0])


def _order(graph: Graph) -> List[List[Value]]:
    """Values in phases: alternately everything non-elementwise that is ready (vector operations, views,
    sources), then every elementwise value that is ready without another vector operation."""
    done: set = set()
    pending = list(graph.values)
    phases: List[List[Value]] = []
    while pending:
        progressed = True
        vector_phase: List[Value] = []
        while progressed:
            progressed = False
            for value in list(pending):
                if value.op not in ELEMENTWISE and all(a.index in done for a in value.args):
                    vector_phase.append(value)
                    pending.remove(value)
                    done.add(value.index)
                    progressed = True
        elementwise: List[Value] = []
        progressed = True
        while progressed:
            progressed = False
            for value in list(pending):
                if value.op in ELEMENTWISE and all(a.index in done for a in value.args):
                    elementwise.append(value)
                    pending.remove(value)
                    done.add(value.index)
                    progressed = True
        if not vector_phase and not elementwise:
            raise AssertionError("graph has a cycle")
        phases += [vector_phase, elementwise]
    return phases


def plan(graph: Graph, kind: Callable[[Value], object] = lambda value: None) -> Plan:
    """The units and storage of ``graph``; ``kind(value)`` names a value's element type (buffers are
    reused only within one kind)."""
    units: List[Unit] = []
    for phase in _order(graph):
        fresh = True  # a loop never spans two phases: a later phase may read its values through views
        for value in phase:
            if value.op in VECTOR_OPS:
                units.append(Unit("vector", [value], value.size))
            elif value.op in ELEMENTWISE:
                if fresh or units[-1].kind != "loop" or units[-1].size != value.size:
                    units.append(Unit("loop", [], value.size))
                    fresh = False
                units[-1].values.append(value)
    return _assign(graph, units, kind)


def _assign(graph: Graph, units: List[Unit], kind: Callable[[Value], object]) -> Plan:
    where: Dict[int, int] = {}  # value index -> unit index
    for position, unit in enumerate(units):
        for value in unit.values:
            where[value.index] = position
    users = graph.users()
    written = {value.index: (kind, part) for kind, part, value in graph.writes}

    def readers(value: Value) -> List[Tuple[int, Value, bool]]:
        """``(unit, reader, direct)`` for every computed value reading ``value``, through views too."""
        found = []
        for user in users[value.index]:
            if user.op == "view":
                found += [(u, r, False) for u, r, _ in readers(user)]
            else:
                found.append((where[user.index], user, True))
        return found

    last_use: Dict[int, int] = {}
    for value in graph.values:
        positions = [u for u, _, _ in readers(value)]
        if value.index in written:
            positions.append(len(units))
        last_use[value.index] = max(positions, default=-1)

    storage: Dict[int, Storage] = {}
    for value in graph.values:
        if value.op in SOURCES:
            storage[value.index] = Storage(value.op, part=value.attrs.get("part"))
        elif value.op == "view":
            storage[value.index] = Storage("view")
    buffers: Dict[str, int] = {}
    free: List[str] = []
    live: Dict[str, int] = {}  # buffer -> index of the value it holds

    kinds: Dict[str, object] = {}

    def take(value: Value) -> str:
        for name in free:
            if buffers[name] == value.size and kinds[name] == kind(value):
                free.remove(name)
                return name
        name = f"b{len(buffers)}"
        buffers[name], kinds[name] = value.size, kind(value)
        return name

    def reads_in(unit: Unit, value: Value) -> List[Tuple[int, bool]]:
        """``(statement, direct)`` of every read of ``value`` inside ``unit``."""
        statements = {v.index: s for s, v in enumerate(unit.values)}
        return [(statements[r.index], direct) for _, r, direct in readers(value) if r.index in statements]

    def element_by_element(unit: Unit, value: Value, statement: int) -> bool:
        """Whether ``unit`` reads ``value`` only at the element it computes, last at ``statement``."""
        return all(direct and s <= statement for s, direct in reads_in(unit, value))

    def in_place(value: Value, position: int, statement: int) -> bool:
        """A written value may go straight into its state part when nothing reads the old state later."""
        kind, part = written[value.index]
        old = [v for v in graph.values if v.op == "state" and v.attrs["part"] is part]
        return kind == "write" and all(
            last_use[v.index] <= position and element_by_element(units[position], v, statement) for v in old
        )

    def reusable(value: Value, position: int, statement: int) -> Optional[str]:
        """The buffer of a dying operand that this loop reads element by element, last by ``statement``."""
        for name, index in live.items():
            if buffers[name] == value.size and kinds[name] == kind(value) and last_use[index] == position:
                if element_by_element(units[position], graph.values[index], statement):
                    del live[name]
                    return name
        return None

    for position, unit in enumerate(units):
        for statement, value in enumerate(unit.values):
            if value is graph.result:
                storage[value.index] = Storage("output")
                continue
            if unit.kind == "loop":
                if value.index in written and in_place(value, position, statement):
                    storage[value.index] = Storage("slot", part=written[value.index][1])
                    continue
                outside = [r for r in readers(value) if r[0] != position or not r[2]]
                if not outside and value.index not in written:
                    storage[value.index] = Storage("local")
                    continue
            name = (reusable(value, position, statement) if unit.kind == "loop" else None) or take(value)
            live[name] = value.index
            storage[value.index] = Storage("buffer", name)
        for name, index in list(live.items()):
            if last_use[index] <= position:
                del live[name]
                free.append(name)
    copies = [(kind, part, value) for kind, part, value in graph.writes if storage[value.index].kind != "slot"]
    return Plan(units, storage, buffers, kinds, copies)
