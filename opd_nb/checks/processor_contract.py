"""The processor contract, read statically: what a `process` method must look like to the SDK's server.

Why: a processor that imports and instantiates fine can still fail on every call in the cloud
(a wrong signature, a `TaskStatus` member that does not exist, a bare float returned) or lose its
metrics (`reward_score` left in `reward_metrics`). Each is visible in the source, so each is reported
with its line before a job is paid for. Only the class's own `process` is read (an inherited one
was checked where it is defined, or is the SDK's).
"""

from __future__ import annotations

import ast
from pathlib import Path

from opd_nb.checks.context import CheckContext

OUTPUTS = {"reward": "RewardOutput", "group_reward": "GroupRewardOutput", "rollout": "RolloutOutput"}
TASK_STATUSES = ("SUCCESS", "FAILED")  # dashscope's TaskStatus members (base_data_model.py:45-49)
# Calls that build something other than the processor's output (the usual slip: returning the Reward).
# (A dict is passed through by the server as it is, so a dict of the right shape works and is not flagged.)
_NOT_OUTPUT_CALLS = {"Reward", "GroupReward", "AgentOutput", "float", "int", "list", "tuple", "str"}


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
    out: list[ast.Return] = []
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(node, ast.Return):
            out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _wrong_return(value: ast.expr | None, kind: str) -> str | None:
    """What a returned expression visibly is, when it cannot be the processor's output."""
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return "None"
    if isinstance(value, ast.Constant):
        return f"a {type(value.value).__name__}"
    if isinstance(value, ast.List | ast.Tuple | ast.JoinedStr):
        return f"a {type(value).__name__.lower().replace('joinedstr', 'string')}"
    name = _call_name(value)
    if name in _NOT_OUTPUT_CALLS or (name and name.endswith("Output") and name != OUTPUTS[kind]):
        return f"a {name}"
    return None


def _score_in_metrics(fn: ast.AST) -> int | None:
    """Line of a `Reward(...)` whose reward_metrics still holds `reward_score`, else None."""
    read_not_popped: set[str] = set()
    popped: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            key = node.slice
            if isinstance(key, ast.Constant) and key.value == "reward_score":
                (popped if isinstance(node.ctx, ast.Del) else read_not_popped).add(node.value.id)
        if (
            _call_name(node) == "pop"
            and isinstance(node.func, ast.Attribute)  # type: ignore[union-attr]
            and isinstance(node.func.value, ast.Name)  # type: ignore[union-attr]
            and node.args  # type: ignore[union-attr]
            and isinstance(node.args[0], ast.Constant)  # type: ignore[union-attr]
            and node.args[0].value == "reward_score"  # type: ignore[union-attr]
        ):
            popped.add(node.func.value.id)  # type: ignore[union-attr]
    for node in ast.walk(fn):
        if _call_name(node) != "Reward":
            continue
        for kw in node.keywords:  # type: ignore[union-attr]
            if kw.arg != "reward_metrics":
                continue
            v = kw.value
            if isinstance(v, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "reward_score" for k in v.keys
            ):
                return node.lineno
            if isinstance(v, ast.Name) and v.id in read_not_popped and v.id not in popped:
                return node.lineno
    return None


def _text_metrics(fn: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of reward_metrics entries written as text in a `Reward(...)` (the SDK's Reward refuses them)."""
    out = []
    for node in ast.walk(fn):
        if _call_name(node) != "Reward":
            continue
        for kw in node.keywords:  # type: ignore[union-attr]
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
    rep, shown, out = ctx.report, ctx.rel(file), OUTPUTS[kind]
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
    where = f"{shown}:{fn.lineno}"
    if not _signature_ok(fn):
        params = ", ".join(a.arg for a in [*fn.args.posonlyargs, *fn.args.args])
        rep.add(
            "functions.process-signature",
            "error",
            where,
            f"{cls.name}.process takes ({params}): the SDK's server calls process(input) with exactly one argument",
            f"def process(self, input_data: {out.replace('Output', 'Input')}) -> {out} (async def works too)",
        )
    if not _decorated_with(fn, "observe_processor"):
        rep.add(
            "functions.no-observe-processor",
            "info",
            where,
            f"{cls.name}.process has no @observe_processor: its calls do not show up in the job's tracing",
            "decorate it: @observe_processor (from dashscope.finetune.reinforcement.component.observability)",
        )
    for ret in _own_returns(fn):
        what = _wrong_return(ret.value, kind)
        if what:
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
        _reward_metrics(ctx, shown, fn)


def _reward_metrics(ctx: CheckContext, shown: str, fn: ast.AST) -> None:
    """What a reward puts in reward_metrics: numbers only, and never the main score again."""
    for line, key in _text_metrics(fn):
        ctx.report.add(
            "functions.metric-not-float",
            "error",
            f"{shown}:{line}",
            f"reward metric {key!r} is not a number: the SDK's Reward refuses it, so every call fails",
            f"return a float for {key!r} (e.g. 1.0 / 0.0), or leave it out of reward_metrics",
        )
    line = _score_in_metrics(fn)
    if line is not None:
        ctx.report.add(
            "functions.reward-score-in-metrics",
            "warning",
            f"{shown}:{line}",
            "reward_metrics still holds `reward_score`: the main score is reported twice and the console "
            "may drop the metrics (the docs' FAQ)",
            'take it out first: reward_score = metrics.pop("reward_score")',
        )
