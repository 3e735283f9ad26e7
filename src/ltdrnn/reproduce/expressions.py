"""The language of the verdict rules: a safe subset of Python expressions over measured numbers.

    Expression("metric(tarnn) >= 0.99 and steps_to(lstm, 0.05) > 300").evaluate(measure)

Only numbers, ``inf``, arithmetic, comparisons, and/or/not, the measures of :data:`MEASURES` (each
on a run label) and the functions of :data:`AGGREGATES` are allowed; anything else is refused when the
expression is parsed, so a rule in the claims table can never run code.
"""

from __future__ import annotations

import ast
import math
from typing import Callable, List, Tuple


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
    lag / its peak over lags), ``jac_ratio(run)`` (``||dh_T/dh_1|| / ||dh_T/dh_{T-1}||``) (``run`` is a
    label of the claim) and ``min``, ``max``, ``abs``. Anything else is refused when parsed.
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
        elif not node.args:
            raise ClaimError(f"expr {self.text!r}: {name} needs arguments")

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

    def evaluate(self, measure: Callable[[str, str, Tuple[float, ...]], float]):
        """``(value, [(call text, number), ...])``; ``measure(name, label, args)`` gives each number and
        may raise :class:`Unmeasured`."""
        seen: List[Tuple[str, float]] = []
        return self._eval(self.tree.body, measure, seen), seen

    def _eval(self, node, measure, seen):
        ev = lambda n: self._eval(n, measure, seen)  # noqa: E731
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            return math.inf
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand) if isinstance(node.op, ast.USub) else not ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            ops = {
                ast.Add: lambda: a + b,
                ast.Sub: lambda: a - b,
                ast.Mult: lambda: a * b,
                ast.Div: lambda: a / b if b else math.copysign(math.inf, a) if a else math.nan,
            }
            return ops[type(node.op)]()
        if isinstance(node, ast.BoolOp):
            values = [bool(ev(v)) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare):
            left, result = ev(node.left), True
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                ok = {
                    ast.Lt: left < right,
                    ast.LtE: left <= right,
                    ast.Gt: left > right,
                    ast.GtE: left >= right,
                    ast.Eq: left == right,
                    ast.NotEq: left != right,
                }[type(op)]
                result = result and ok
                left = right
            return result
        name = node.func.id
        if name in AGGREGATES:
            return AGGREGATES[name](*[ev(a) for a in node.args])
        args = tuple(ev(a) for a in node.args[1:])
        value = float(measure(name, node.args[0].id, args))
        seen.append((ast.unparse(node), value))
        return value
