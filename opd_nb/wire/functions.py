"""Function code, as the SDK's registration flow calls it: the signed upload URL and its PUT, layers,
registration, and the instances that serve a function (load, query, logs, delete)."""

from __future__ import annotations

from pydantic import Field

from opd_nb.wire.base import Wire, absent_when_none


class UploadUrl(Wire):
    url: str  # the signed PUT target (OSS on the cloud, /local-oss/ here)
    unique_key: str


class StoredZip(Wire):
    key: str
    bytes: int


class Layer(Wire):
    layer_code: str
    status: str
    note: str | None = absent_when_none()  # said once, when the layer is made


class Registered(Wire):
    """A registered function: its id under the kind's key (``reward_id``, ``rollout_id`` or
    ``group_reward_id``; only that one is sent), the file and the class."""

    reward_id: str | None = absent_when_none()
    rollout_id: str | None = absent_when_none()
    group_reward_id: str | None = absent_when_none()
    name: str
    func: str


class Instance(Wire):
    """A loaded function instance: the SDK reads ``instanceId``, ``trigger_url`` and ``trigger_token``, and
    ``status`` (1 running, -1 anything else); ``state`` says which."""

    instance_id_sdk: str = Field(alias="instanceId")
    instance_id: str
    entity_id: str
    status: int
    state: str
    trigger_url: str | None = None
    trigger_token: str | None = None


class InstanceLogEntry(Wire):
    message: str


class InstanceLogs(Wire):
    page_number: int
    page_size: int
    total_count: int
    log_entries: list[InstanceLogEntry] = []


class InstanceGone(Wire):
    status: str  # "deleted"
    sandbox_code: str


class InstanceDeleted(Wire):
    """The delete answer has its own shape: ``code`` 0 and ``message`` "success" beside ``data``."""

    request_id: str
    code: int
    message: str
    data: InstanceGone
