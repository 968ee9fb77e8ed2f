"""Deployment plans (``plan`` in the v2 SDK's ``client.deployments.create``) and the fields each needs.

One module for the rule, so that ``opd deploy --plan`` checks a plan before anything is sent and
``opd serve`` answers the same 400 for a body that breaks it, as Bailian does:

- ``lora``: the default for text models, billed by tokens; needs nothing more.
- ``ptu``: provisioned throughput; ``deploy_spec`` carries ``input_tpm`` and ``output_tpm`` (and
  optionally ``thinking_output_tpm``). The SDK's create body has no TPM fields of its own, so they
  travel in ``deploy_spec`` (inferred from the CLI's reference).
- ``mu``: model units; "MU deployments reject the create call unless both are present": a
  ``deploy_spec`` (from ``GET /deployments/models``) and a ``billing_method`` (e.g. ``POST_PAY``).

On Bailian every deployment costs money while it runs (or per token on ``lora``), so a cloud deploy
needs the caller's consent (:func:`opd_nb.client.jobs.require_deploy_consent`, inside the deploy call, ``--yes``); a local one costs
nothing. The plans themselves are facts of the wire: the control plane checks a create body against
them without importing the paid path's rules.
"""

from __future__ import annotations

import json
from typing import Any

from opd_nb.errors import OpdError

LORA, PTU, MU = "lora", "ptu", "mu"
PLANS = (LORA, PTU, MU)
BILLING_METHODS = ("POST_PAY", "PRE_PAY")
TPM_FIELDS = ("input_tpm", "output_tpm")
CHARGE_TYPES = {LORA: "token", PTU: "ptu"}  # mu: its billing_method


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def plan_problems(plan: str | None, deploy_spec: Any = None, billing_method: Any = None) -> list[str]:
    """What a create call with this plan lacks, one line each with the fix (empty: it is complete)."""
    plan = plan or LORA
    if plan not in PLANS:
        return [f"plan {plan!r} is not one of {', '.join(PLANS)} (lora: token-billed, the default)"]
    problems = []
    if deploy_spec is not None and not isinstance(deploy_spec, dict):
        problems.append('deploy_spec must be an object, e.g. {"input_tpm": 100000, "output_tpm": 20000}')
        deploy_spec = None
    if billing_method is not None and billing_method not in BILLING_METHODS:
        problems.append(f"billing_method {billing_method!r} is not one of {', '.join(BILLING_METHODS)}")
    if plan == PTU:
        spec = deploy_spec or {}
        missing = [f for f in TPM_FIELDS if not _positive(spec.get(f))]
        if missing:
            problems.append(
                f"plan 'ptu' needs deploy_spec.{' and deploy_spec.'.join(missing)} (provisioned tokens per "
                'minute, positive integers), e.g. deploy_spec={"input_tpm": 100000, "output_tpm": 20000}'
            )
    if plan == MU:
        if not deploy_spec:
            problems.append(
                "plan 'mu' needs deploy_spec (the model-unit spec; GET /deployments/models lists them); "
                "MU deployments reject the create call without it"
            )
        if billing_method is None:
            problems.append(f"plan 'mu' needs billing_method ({' or '.join(BILLING_METHODS)})")
    return problems


def parse_deploy_spec(text: str | None) -> dict | None:
    """``--deploy-spec JSON`` as an object (a clear error for anything else)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise OpdError(
            f"--deploy-spec is not JSON ({exc})",
            fix='quote it, e.g. --deploy-spec \'{"input_tpm": 100000, "output_tpm": 20000}\'',
        ) from None
    if not isinstance(value, dict):
        raise OpdError("--deploy-spec must be a JSON object", fix='e.g. --deploy-spec \'{"spec": "MU1"}\'')
    return value


def check_plan(plan: str | None, deploy_spec: Any = None, billing_method: Any = None) -> None:
    """Raise one OpdError naming everything a plan lacks (the client's check before sending)."""
    problems = plan_problems(plan, deploy_spec, billing_method)
    if problems:
        raise OpdError(
            "; ".join(problems),
            where="opd deploy --plan",
            fix="pass the fields the plan needs (--deploy-spec JSON, --billing-method), or use --plan lora",
            code="InvalidParameter",
        )


def charge_type(plan: str | None, billing_method: str | None = None) -> str:
    """What a deployment of this plan is billed by (Bailian's ``charge_type``)."""
    plan = plan or LORA
    return CHARGE_TYPES.get(plan) or (billing_method or "POST_PAY")
