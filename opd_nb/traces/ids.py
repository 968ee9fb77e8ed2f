"""Which rollout sample a span belongs to: the ids the engine sends and the SDK stamps on every span.

The engine calls a function with ``request_metadata = {job_id, sample_id, rollout_id, attempt_id}``;
the SDK's entry span puts ``sample_id``, ``rollout_id`` and ``attempt_id`` into W3C baggage, and its
baggage processor copies them onto every span of the call (``bailian.agentic_rl.*``). Ours are built
here and read back here, so a span finds its rollout record (kind, step, group, sample) and a record
finds its spans:

* ``sample_id``: ``"step 12-3"`` (train step 12, prompt 3 of the step) or ``"validation at step 12-3"``
  (validation row 3 of the evaluation at step 12): the engine's ``where`` for the step, a dash, the group;
* ``rollout_id``: the sample's index within its group (``"0"`` .. ``n_rollouts - 1``), the record's ``sample``;
* ``attempt_id``: ``"0"`` (the local engine does not retry a call).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ROLLOUT_ID_KEY = "bailian.agentic_rl.rollout_id"
SAMPLE_ID_KEY = "bailian.agentic_rl.sample_id"
ATTEMPT_ID_KEY = "bailian.agentic_rl.attempt_id"
KINDS = ("train", "validation")
Kind = Literal["train", "validation"]
_SAMPLE = re.compile(r"^(validation at )?step (\d{1,9})-(\d{1,9})$")


def where(kind: str, step: int) -> str:
    """The engine's name for a step's calls (its log lines say it too): ``step 12``, ``validation at step 12``."""
    return f"validation at step {step}" if kind == "validation" else f"step {step}"


def sample_id(where_: str, group: int) -> str:
    """The ``sample_id`` of a call for prompt `group` in the step named `where_` (see :func:`where`)."""
    return f"{where_}-{group}"


class SampleRef(BaseModel):
    """The rollout record a trace belongs to (``GET /rollouts`` names it by kind, step, group, sample)."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    step: int
    group: int
    sample: int
    attempt: int = 0

    def label(self) -> str:
        return f"{self.kind} step {self.step} · group {self.group} · sample {self.sample}"


def parse(sample: str | None, rollout: str | None, attempt: str | None = None) -> SampleRef | None:
    """The record named by a span's ids, or None when they are not ours (a span outside a call)."""
    m = _SAMPLE.match(str(sample or "").strip())
    if m is None:
        return None
    try:
        index = int(str(rollout if rollout not in (None, "") else "0"))
        tries = int(str(attempt if attempt not in (None, "") else "0"))
    except ValueError:
        return None
    if index < 0 or tries < 0:
        return None
    kind: Kind = "validation" if m.group(1) else "train"
    return SampleRef(kind=kind, step=int(m.group(2)), group=int(m.group(3)), sample=index, attempt=tries)


def of_attributes(attributes: Mapping[str, Any]) -> SampleRef | None:
    """The record named by a span's ``bailian.agentic_rl.*`` attributes, or None."""
    return parse(
        attributes.get(SAMPLE_ID_KEY), attributes.get(ROLLOUT_ID_KEY), attributes.get(ATTEMPT_ID_KEY)
    )
