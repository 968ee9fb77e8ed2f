"""The processor contract, read statically: what a `process` method must look like to the SDK's server.

Why: a processor that imports and instantiates fine can still fail on every call in the cloud
(a wrong signature, a `TaskStatus` member that does not exist, a bare float returned) or lose its
metrics (`reward_score` left in `reward_metrics`). Each is visible in the source, so each is reported
with its line before a job is paid for. Only the class's own `process` is read (an inherited one
was checked where it is defined, or is the SDK's).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

from opd_nb.checks.context import CheckContext

OUTPUTS = {"reward": "RewardOutput", "group_reward": "GroupRewardOutput", "rollout": "RolloutOutput"}
TASK_STATUSES = ("SUCCESS", "FAILED")  # dashscope's TaskStatus members (base_data_model.py:45-49)
# Calls that build something other than the processor's output (the usual slip: returning the Reward).
_NOT_OUTPUT_CALLS = {"Reward", "GroupReward", "AgentOutput", "float", "int", "list", "tuple", "str"}
# A dict is sent on by the server as it is (server.py `_serialize_result`), so it must have the output
# model's shape: (its required field, that field's required keys) per kind, from dashscope's pydantic
# models (RewardOutput.reward: Reward(reward_score, ...); GroupRewardOutput.reward: GroupReward(rewards);
# RolloutOutput.agent_output); tests/test_checks_contracts.py keeps them equal to the installed SDK's.
DICT_SHAPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "reward": ("reward", ("reward_score",)),
    "group_reward": ("reward", ("rewards",)),
    "rollout": ("agent_output", ()),
}


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return (
            func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        )
    return None


def _decorated_with(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (isinstance(target, ast.Name) and target.id == name) or (
            isinstance(target, ast.Attribute) and target.attr == name
        ):
            return True
    return False


def _own_returns(fn: ast.AST) -> list[ast.Return]:
    """`return` statements of `fn` itself, not of functions or lambdas nested in it."""
    return [node for node in _own_nodes(fn) if isinstance(node, ast.Return)]


class Flow:
    """The assignments of one function (name -> (line, value) in order), to follow a variable to what it
    was assigned before a given line; and the module's functions, to see what a helper returns."""

    def __init__(self, fn: ast.AST, module: ast.Module | None = None):
        self.assigned: dict[str, list[tuple[int, ast.expr]]] = {}
        self.popped: set[str] = set()  # names `reward_score` is popped or deleted from
        self.read: set[str] = set()  # names `reward_score` is read from or stored into
        self.merged: dict[str, list[ast.expr]] = {}  # name -> what `name.update(...)` merged into it
        for node in _own_nodes(fn):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.assigned.setdefault(t.id, []).append((node.lineno, node.value))
            self._score_access(node)
        self.helpers = {
            n.name: n
            for n in (module.body if module else [])
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }

    def _score_access(self, node: ast.AST) -> None:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and _is_score(node.slice):
            (self.popped if isinstance(node.ctx, ast.Del) else self.read).add(node.value.id)
        method = node.func if isinstance(node, ast.Call) else None
        if (
            isinstance(method, ast.Attribute)
            and method.attr == "update"
            and isinstance(method.value, ast.Name)
        ):
            call: ast.Call = node  # pyright: ignore[reportAssignmentType]
            self.merged.setdefault(method.value.id, []).extend(
                [*call.args, *(k.value for k in call.keywords)]
            )
            if any(k.arg == "reward_score" for k in call.keywords):
                self.read.add(method.value.id)
        if isinstance(method, ast.Attribute) and isinstance(method.value, ast.Name) and node.args:  # pyright: ignore[reportAttributeAccessIssue]
            if _is_score(node.args[0]):  # pyright: ignore[reportAttributeAccessIssue]
                if method.attr == "pop":
                    self.popped.add(method.value.id)
                elif method.attr in ("get", "__getitem__"):
                    self.read.add(method.value.id)

    def value(self, expr: ast.expr | None, line: int) -> ast.expr | None:
        """`expr`, or for a variable the value it was last assigned before `line` (followed a few hops)."""
        for _ in range(5):
            if not isinstance(expr, ast.Name) or expr.id not in self.assigned:
                return expr
            before = [v for ln, v in self.assigned[expr.id] if ln <= line]
            if not before:
                return expr
            expr = before[-1]
        return expr

    def returns_score_dict(self, call: ast.expr) -> bool:
        """A call of a module function whose returned dict has a `reward_score` key (the seed's
        `your_scoring_function`)."""
        name = _call_name(call)
        helper = (
            self.helpers.get(name or "")
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            else None
        )
        if helper is None:
            return False
        inner = Flow(helper)
        return any(_dict_has_score(inner.value(r.value, r.lineno)) for r in _own_returns(helper))


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of `fn` itself, not of functions, lambdas or classes nested in it."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _is_score(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "reward_score"


def _dict_has_score(expr: ast.expr | None) -> bool:
    return isinstance(expr, ast.Dict) and any(k is not None and _is_score(k) for k in expr.keys)


def _dict_keys(expr: ast.expr | None) -> set[str] | None:
    """The keys of a dict built in place (`{...}` or `dict(k=...)`), None when they cannot all be read."""
    if isinstance(expr, ast.Dict):
        if any(k is None or not isinstance(k, ast.Constant) for k in expr.keys):
            return None
        return {str(k.value) for k in expr.keys if isinstance(k, ast.Constant)}
    if isinstance(expr, ast.Call) and _call_name(expr) == "dict" and not expr.args:
        if any(kw.arg is None for kw in expr.keywords):
            return None
        return {str(kw.arg) for kw in expr.keywords}
    return None


def _dict_item(expr: ast.expr, key: str) -> ast.expr | None:
    if isinstance(expr, ast.Dict):
        return next(
            (
                v
                for k, v in zip(expr.keys, expr.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == key
            ),
            None,
        )
    if isinstance(expr, ast.Call):
        return next((kw.value for kw in expr.keywords if kw.arg == key), None)
    return None


def _wrong_dict(expr: ast.expr, kind: str, flow: Flow, line: int) -> str | None:
    """What a returned dict lacks for the SDK's server, which sends a dict on as it is (its output
    model's required fields: DICT_SHAPES)."""
    keys = _dict_keys(expr)
    if keys is None:
        return None
    top, inner = DICT_SHAPES[kind]
    if top not in keys:
        found = f" (it has {', '.join(sorted(keys))})" if keys else ""
        return f"a dict without `{top}`{found}"
    nested = flow.value(_dict_item(expr, top), line)
    nested_keys = _dict_keys(nested)
    missing = [k for k in inner if nested_keys is not None and k not in nested_keys]
    return f"a dict whose `{top}` has no `{missing[0]}`" if missing else None


def _wrong_return(value: ast.expr | None, kind: str, flow: Flow, line: int) -> str | None:
    """What a returned expression visibly is (a variable followed to its value), when it cannot be the
    processor's output."""
    value = flow.value(value, line)
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return "None"
    if isinstance(value, ast.Constant):
        return f"a {type(value.value).__name__}"
    if isinstance(value, ast.List | ast.Tuple | ast.JoinedStr):
        return f"a {type(value).__name__.lower().replace('joinedstr', 'string')}"
    if isinstance(value, ast.Dict) or _call_name(value) == "dict":
        return _wrong_dict(value, kind, flow, line)
    name = _call_name(value)
    if name in _NOT_OUTPUT_CALLS or (name and name.endswith("Output") and name != OUTPUTS[kind]):
        return f"a {name}"
    return None


def _holds_score(expr: ast.expr | None, flow: Flow, line: int, depth: int = 0) -> bool:
    """Whether a reward_metrics value still carries `reward_score`: written in it, unpacked or copied or
    comprehended from a dict that has it (and it was not popped), or returned so by a helper."""
    if expr is None or depth > 6:
        return False
    if isinstance(expr, ast.Name):
        if expr.id in flow.popped:
            return False
        if expr.id in flow.read or any(
            _holds_score(m, flow, line, depth + 1) for m in flow.merged.get(expr.id, [])
        ):
            return True
        followed = flow.value(expr, line)
        return followed is not expr and _holds_score(followed, flow, line, depth + 1)
    if isinstance(expr, ast.Dict):
        return _dict_has_score(expr) or any(
            k is None and _holds_score(v, flow, line, depth + 1)
            for k, v in zip(expr.keys, expr.values, strict=True)
        )
    if isinstance(expr, ast.DictComp):
        gen = expr.generators[0]
        if any(_is_score(n) for cond in gen.ifs for n in ast.walk(cond)):
            return False  # filtered out: `if k != "reward_score"`
        return _holds_score(_iterated(gen.iter), flow, line, depth + 1)
    if isinstance(expr, ast.Call):
        if _call_name(expr) in ("dict", "copy", "deepcopy"):
            if any(kw.arg == "reward_score" for kw in expr.keywords):
                return True
            sources = [*expr.args, *(kw.value for kw in expr.keywords if kw.arg is None)]
            return any(_holds_score(src, flow, line, depth + 1) for src in sources)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "copy":
            return _holds_score(expr.func.value, flow, line, depth + 1)
        return flow.returns_score_dict(expr)
    return False


def _iterated(node: ast.expr) -> ast.expr:
    """The dict a comprehension walks: `d` of `d.items()`, `d.keys()`, `d`."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("items", "keys")
    ):
        return node.func.value
    return node


def _metrics_values(fn: ast.AST) -> list[tuple[int, ast.expr]]:
    """(line, value) of every reward_metrics given in `fn`: a keyword of a call, or a dict's key."""
    out: list[tuple[int, ast.expr]] = []
    for node in _own_nodes(fn):
        if isinstance(node, ast.Call):
            out += [(node.lineno, kw.value) for kw in node.keywords if kw.arg == "reward_metrics"]
        elif isinstance(node, ast.Dict):
            out += [
                (node.lineno, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == "reward_metrics"
            ]
    return out


def _score_in_metrics(fn: ast.AST, module: ast.Module | None = None) -> int | None:
    """Line of a reward_metrics that still holds `reward_score` (followed through the code's data flow)."""
    flow = Flow(fn, module)
    hits = [line for line, value in _metrics_values(fn) if _holds_score(value, flow, line)]
    return min(hits) if hits else None


def _text_metrics(fn: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of reward_metrics entries written as text in a `Reward(...)` (the SDK's Reward refuses them)."""
    out = []
    for node in ast.walk(fn):
        if _call_name(node) != "Reward":
            continue
        for kw in node.keywords:  # pyright: ignore[reportAttributeAccessIssue]
            if kw.arg == "reward_metrics" and isinstance(kw.value, ast.Dict):
                for key, value in zip(kw.value.keys, kw.value.values, strict=True):
                    text = isinstance(value, ast.JoinedStr) or (
                        isinstance(value, ast.Constant) and isinstance(value.value, str | bool)
                    )
                    if text and isinstance(key, ast.Constant):
                        out.append((value.lineno, str(key.value)))
    return out


def _bad_statuses(tree: ast.AST) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "TaskStatus"
        and node.attr not in TASK_STATUSES
        and not node.attr.startswith("_")
    ]


def _signature_ok(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Takes `self` and one input (further parameters only with defaults), as the server calls it."""
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    required = len(positional) - len(args.defaults)
    takes_input = bool(args.vararg) or len(positional) >= 2
    return takes_input and required <= 2 and all(d is not None for d in args.kw_defaults)


def check_process(ctx: CheckContext, file: Path, tree: ast.Module, cls: ast.ClassDef, kind: str) -> None:
    """Every rule of the contract on `cls.process` (and TaskStatus names anywhere in the file)."""
    rep, shown = ctx.report, ctx.rel(file)
    for line, attr in _bad_statuses(tree):
        rep.add(
            "functions.unknown-task-status",
            "error",
            f"{shown}:{line}",
            f"TaskStatus.{attr} does not exist (the SDK's members are {', '.join(TASK_STATUSES)}): the call "
            "fails with AttributeError",
            f"use TaskStatus.{'FAILED' if attr.upper().startswith('FAIL') else 'SUCCESS'}",
        )
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    fn = next((n for n in methods if n.name == "process"), None)
    if fn is None:
        return
    _process_shape(ctx, shown, cls.name, fn, kind)
    flow = Flow(fn, tree)
    for ret in _own_returns(fn):
        what = _wrong_return(ret.value, kind, flow, ret.lineno)
        if what:
            out = OUTPUTS[kind]
            wrap = " wrapping reward=Reward(reward_score=..., reward_metrics=...)" if kind == "reward" else ""
            rep.add(
                "functions.bad-return",
                "error",
                f"{shown}:{ret.lineno}",
                f"{cls.name}.process returns {what}, not a {out}: the SDK's server sends it on in the wrong "
                "shape and the control plane finds no result in it",
                f"return {out}(...){wrap}",
            )
    if kind == "reward":
        _reward_metrics(ctx, shown, methods, tree)


def _process_shape(
    ctx: CheckContext, shown: str, cls: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, kind: str
) -> None:
    """The method itself: one input, `async def` (the docs' contract), traced."""
    rep, out, where = ctx.report, OUTPUTS[kind], f"{shown}:{fn.lineno}"
    signature = f"async def process(self, input_data: {out.replace('Output', 'Input')}) -> {out}"
    if not _signature_ok(fn):
        params = ", ".join(a.arg for a in [*fn.args.posonlyargs, *fn.args.args])
        rep.add(
            "functions.process-signature",
            "error",
            where,
            f"{cls}.process takes ({params}): the SDK's server calls process(input) with exactly one argument",
            signature,
        )
    if isinstance(fn, ast.FunctionDef):
        rep.add(
            "functions.process-not-async",
            "warning",
            where,
            f"{cls}.process is a plain `def`: the docs' contract is `async def process` (seed 000), so a caller "
            "that awaits it fails (the workspace's own tests: asyncio.run(...process(...)) raises 'a coroutine "
            "was expected'); the SDK 2.0.2 server runs a plain def in a worker thread",
            f"make it {signature} (await any I/O inside it)",
        )
    if not _decorated_with(fn, "observe_processor"):
        rep.add(
            "functions.no-observe-processor",
            "info",
            where,
            f"{cls}.process has no @observe_processor: its calls do not show up in the job's tracing",
            "decorate it: @observe_processor (from dashscope.finetune.reinforcement.component.observability)",
        )


def _reward_metrics(ctx: CheckContext, shown: str, methods: Sequence[ast.AST], tree: ast.Module) -> None:
    """What a reward puts in reward_metrics, in any method of the class: numbers only, and never the main
    score again (followed through the code's data flow, not one spelling)."""
    for fn in methods:
        for line, key in _text_metrics(fn):
            ctx.report.add(
                "functions.metric-not-float",
                "error",
                f"{shown}:{line}",
                f"reward metric {key!r} is not a number: the SDK's Reward refuses it, so every call fails",
                f"return a float for {key!r} (e.g. 1.0 / 0.0), or leave it out of reward_metrics",
            )
        line = _score_in_metrics(fn, tree)
        if line is not None:
            ctx.report.add(
                "functions.reward-score-in-metrics",
                "warning",
                f"{shown}:{line}",
                "reward_metrics still holds `reward_score`: the main score is reported twice and the console "
                "may drop the metrics (the docs' FAQ)",
                'take it out first: reward_score = metrics.pop("reward_score")',
            )
