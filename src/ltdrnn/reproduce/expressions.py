"""The language of the verdict rules: a safe subset of Python expressions over measured numbers.

    Expression("metric(tarnn) >= 0.99 and steps_to(lstm, 0.05) > 300").evaluate(measure)

Every number is an interval ``(lo, hi)`` (a measured number has equal bounds; a censored one, such as
the steps to a threshold of a run stopped before it got there, has no upper bound), arithmetic is
interval arithmetic, and a comparison is True or False where it holds or fails for every value in the
intervals and None (undecided) where it depends on them; and/or/not follow three-valued logic.

Only numbers, ``inf``, arithmetic, comparisons, and/or/not, the measures of :data:`MEASURES` (each
on a run label) and the functions of :data:`AGGREGATES` are allowed; anything else is refused when the
expression is parsed, so a rule in the claims table can never run code.
"""

from __future__ import annotations

import ast
import math
from typing import Callable, List, Optional, Tuple

Bounds = Tuple[float, float]


class ClaimError(ValueError):
    """The claims table (or one of its rules) is malformed; the message names the claim and the key."""


class Unmeasured(LookupError):
    """A check needs a number that the stored runs do not have."""


class Underflow(Unmeasured):
    """A gradient-norm ratio is exactly 0 ("underflow") or not a finite number ("not finite": 0/0, or
    a model that diverged): nothing can be compared with it. ``call`` names it, ``shown`` says which."""

    def __init__(self, call: str, shown: str, message: str) -> None:
        super().__init__(message)
        self.call, self.shown = call, shown


# name -> number of arguments after the run label
MEASURES = {
    "metric": 0,
    "baseline": 0,
    "params": 0,
    "train_s": 0,
    "skip": 0,
    "best_val": 0,
    "steps_to": 1,
    "lag_ratio": 0,
    "jac_ratio": 0,
    "recall": 0,
}
AGGREGATES = {"min": min, "max": max, "abs": abs}
_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.Compare,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Eq,
    ast.NotEq,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.UnaryOp,
    ast.USub,
    ast.Not,
    ast.Call,
    ast.Name,
    ast.Constant,
    ast.Load,
)


class Expression:
    """A verdict rule such as ``metric(tarnn) >= 0.99 and steps_to(lstm, 0.05) > 300``.

    Allowed: numbers, ``inf``, arithmetic (+ - * /), comparisons (also chained), and/or/not, the
    measures ``metric(run)``, ``baseline(run)``, ``params(run)``, ``train_s(run)``, ``skip(run)``,
    ``best_val(run)``, ``steps_to(run, threshold)``, ``lag_ratio(run)`` (gradient norm at the largest
    lag / its peak over lags), ``jac_ratio(run)`` (``||dh_T/dh_1|| / ||dh_T/dh_{T-1}||``), ``recall(run)``
    (accuracy on the copy task's recall steps; an interval where only bounded) (``run`` is a label of the claim) and
    ``min``, ``max``, ``abs``. Anything else is refused when parsed.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ClaimError(f"expr: expected a string, got {text!r}")
        try:
            self.tree = ast.parse(text, mode="eval")
        except SyntaxError as error:
            raise ClaimError(f"expr {text!r}: not an expression ({error.msg})") from None
        self.text = text
        self._check(self.tree)
        if not isinstance(self.tree.body, (ast.Compare, ast.BoolOp)) and not (
            isinstance(self.tree.body, ast.UnaryOp) and isinstance(self.tree.body.op, ast.Not)
        ):
            raise ClaimError(f"expr {text!r}: a rule must be a comparison (or and/or/not of comparisons)")

    def _check(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED):
                raise ClaimError(f"expr {self.text!r}: {type(node).__name__} is not allowed")
            if isinstance(node, ast.Constant) and (
                isinstance(node.value, bool) or not isinstance(node.value, (int, float))
            ):
                raise ClaimError(f"expr {self.text!r}: only numbers are allowed as constants, got {node.value!r}")
            if isinstance(node, ast.Call):
                self._check_call(node)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Name)
                and not self._is_label(node)
                and node.id != "inf"
                and not self._is_function(node)
            ):
                raise ClaimError(
                    f"expr {self.text!r}: unknown name {node.id!r} (run labels go inside a "
                    f"measure, e.g. metric({node.id}))"
                )

    def _check_call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if node.keywords or name not in {**MEASURES, **AGGREGATES}:
            raise ClaimError(
                f"expr {self.text!r}: unknown function {ast.unparse(node.func)!r}; functions: "
                f"{', '.join([*MEASURES, *AGGREGATES])}"
            )
        if name in MEASURES:
            if len(node.args) != 1 + MEASURES[name] or not isinstance(node.args[0], ast.Name):
                raise ClaimError(
                    f"expr {self.text!r}: {name} takes a run label"
                    + (f" and {MEASURES[name]} number(s)" if MEASURES[name] else "")
                    + f", got {ast.unparse(node)!r}"
                )
        elif not node.args or (name == "abs" and len(node.args) != 1):
            raise ClaimError(f"expr {self.text!r}: {name} needs " + ("one argument" if name == "abs" else "arguments"))

    def _measure_calls(self) -> List[ast.Call]:
        return [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in MEASURES
        ]

    def _is_label(self, node: ast.Name) -> bool:
        return any(call.args and call.args[0] is node for call in self._measure_calls())

    def _is_function(self, node: ast.Name) -> bool:
        return any(isinstance(n, ast.Call) and n.func is node for n in ast.walk(self.tree))

    def labels(self) -> set:
        return {call.args[0].id for call in self._measure_calls()}

    def reads(self) -> set:
        """``{(measure, label), ...}`` the expression reads."""
        return {(call.func.id, call.args[0].id) for call in self._measure_calls()}

    def evaluate(self, measure: Callable[[str, str, Tuple[float, ...]], Bounds]):
        """``(outcome, [(call text, (lo, hi)), ...])``: the outcome is True, False or None (undecided:
        the intervals overlap, e.g. a censored ``steps_to`` against a run that needed more steps than the
        censored one was given). ``measure(name, label, args)`` gives each number as an interval
        ``(lo, hi)`` and may raise :class:`Unmeasured`."""
        seen: List[Tuple[str, Bounds]] = []
        return self._eval(self.tree.body, measure, seen), seen

    def _eval(self, node, measure, seen):
        ev = lambda n: self._eval(n, measure, seen)  # noqa: E731
        if isinstance(node, ast.Constant):
            return float(node.value), float(node.value)
        if isinstance(node, ast.Name):
            return math.inf, math.inf
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                value = ev(node.operand)
                return None if value is None else not value
            lo, hi = ev(node.operand)
            return -hi, -lo
        if isinstance(node, ast.BinOp):
            return _arithmetic(type(node.op), ev(node.left), ev(node.right))
        if isinstance(node, ast.BoolOp):
            return _kleene(isinstance(node.op, ast.And), [ev(v) for v in node.values])
        if isinstance(node, ast.Compare):
            left, results = ev(node.left), []
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                results.append(_compare(type(op), left, right))
                left = right
            return _kleene(True, results)
        name = node.func.id
        if name in AGGREGATES:
            return _aggregate(name, [ev(a) for a in node.args])
        args = tuple(ev(a)[0] for a in node.args[1:])
        lo, hi = measure(name, node.args[0].id, args)
        seen.append((ast.unparse(node), (float(lo), float(hi))))
        return float(lo), float(hi)


def _kleene(conjunction: bool, values: List[Optional[bool]]) -> Optional[bool]:
    """Three-valued and/or: a decided False (and) or True (or) wins over an undecided None."""
    decisive = not conjunction
    if any(v is decisive for v in values):
        return decisive
    return None if any(v is None for v in values) else conjunction


def _compare(op, a: Bounds, b: Bounds) -> Optional[bool]:
    """``a op b`` for intervals: True (False) if it holds (fails) for every pair of values in them,
    None if it depends on where in them the values are. A nan never compares true."""
    if any(math.isnan(v) for v in (*a, *b)):
        return op is ast.NotEq
    if op in (ast.Gt, ast.GtE):
        return _compare(ast.Lt if op is ast.Gt else ast.LtE, b, a)
    if op is ast.Lt:
        return True if a[1] < b[0] else False if a[0] >= b[1] else None
    if op is ast.LtE:
        return True if a[1] <= b[0] else False if a[0] > b[1] else None
    equal = True if a[0] == a[1] == b[0] == b[1] else False if a[1] < b[0] or b[1] < a[0] else None
    return equal if op is ast.Eq else (None if equal is None else not equal)


def _arithmetic(op, a: Bounds, b: Bounds) -> Bounds:
    if op is ast.Add:
        return a[0] + b[0], a[1] + b[1]
    if op is ast.Sub:
        return a[0] - b[1], a[1] - b[0]
    if op is ast.Div:
        if b[0] == b[1]:  # a number: as before, x / 0 is +-inf and 0 / 0 nan
            d = b[0]
            point = lambda x: x / d if d else math.copysign(math.inf, x) if x else math.nan  # noqa: E731
            return _hull(point(a[0]), point(a[1]))
        if b[0] <= 0 <= b[1]:
            return -math.inf, math.inf
        b = (1 / b[1], 1 / b[0])
    # 0 x inf is 0 in interval arithmetic (a bound that is exactly 0 stays 0)
    products = [x * y if x and y else 0.0 for x in a for y in b]
    return min(products), max(products)


def _hull(x: float, y: float) -> Bounds:
    if math.isnan(x) or math.isnan(y):
        return math.nan, math.nan
    return min(x, y), max(x, y)


def _aggregate(name: str, values: List[Bounds]) -> Bounds:
    if any(math.isnan(v) for bounds in values for v in bounds):
        return math.nan, math.nan
    if name == "min":
        return min(v[0] for v in values), min(v[1] for v in values)
    if name == "max":
        return max(v[0] for v in values), max(v[1] for v in values)
    (lo, hi), *_ = values
    if lo >= 0:
        return lo, hi
    if hi <= 0:
        return -hi, -lo
    return 0.0, max(-lo, hi)
