"""What a paid deploy or a cloud evaluation would start, in the words and numbers its confirmation shows.

A job's size is :mod:`opd_nb.paid.estimate`'s (it reads the workspace); a deployment's and an evaluation's
are read here from the call's own arguments, so the client's consent line (`opd deploy --cloud` without
``--yes``) and an agent's confirmation (its ``estimate`` and ``request``) say the same. A leaf beside
:mod:`opd_nb.paid.consent`: the client imports it without the spec or the checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opd_nb import settings
from opd_nb.wire.deploy_plans import LORA

DEPLOY_PRICE_VAR = settings.DEPLOY_PRICE_PER_UNIT_HOUR.name


def deploy_size(model: str, plan: str | None, capacity: int) -> dict[str, Any]:
    """A deployment's model, plan, capacity, how it is billed and, where known, its price per hour."""
    plan = plan or LORA
    hourly = plan != LORA  # lora: per token; ptu and mu: by the hour while it runs
    unit_price = settings.DEPLOY_PRICE_PER_UNIT_HOUR.get() if hourly else None
    return {
        "model": model,
        "plan": plan,
        "capacity": capacity,
        "billed": "by the hour while it runs" if hourly else "per token (each model call)",
        "price_per_unit_hour": unit_price,
        "money_per_hour": unit_price * capacity if unit_price is not None else None,
    }


def deploy_line(size: dict[str, Any]) -> str:
    """One line: the model, the plan and capacity, and the price per hour where known."""
    if size["money_per_hour"] is not None:
        money = f"{size['money_per_hour']:,.2f} per hour ({size['price_per_unit_hour']:g} per unit-hour)"
    elif size["plan"] == LORA:
        money = "no hourly price: each call is billed by its tokens"
    else:
        money = f"price per hour unknown: set {DEPLOY_PRICE_VAR} to see it"
    return (
        f"a paid Bailian deployment of {size['model']} (plan {size['plan']}, capacity {size['capacity']}, "
        f"billed {size['billed']}; {money})"
    )


def deploy_warnings(size: dict[str, Any]) -> list[str]:
    """What the user should know before saying yes."""
    out = ["it keeps running, and billing, until it is undeployed"]
    if size["plan"] != LORA and size["money_per_hour"] is None:
        out.append(f"its hourly price is not known here: set {DEPLOY_PRICE_VAR} to see it")
    return out


def eval_size(models: Sequence[str], rows: int, max_tokens: int | None) -> dict[str, Any]:
    """An evaluation's chat calls: one per row and model, each billed by its tokens at the model's price."""
    calls = rows * len(models)
    return {
        "models": list(models),
        "rows": rows,
        "calls": calls,
        "max_tokens": max_tokens,
        "generated_tokens_max": calls * max_tokens if max_tokens else None,
        "billed": "per token, at each model's price (no hourly price: nothing keeps running)",
    }


def eval_line(size: dict[str, Any]) -> str:
    return (
        f"this evaluation makes {size['calls']} calls to Bailian's chat API, which cost money "
        f"({size['rows']} rows x {len(size['models'])} model(s): {', '.join(size['models'])}; billed "
        f"{size['billed']})"
    )
