"""Request bodies, as pydantic models: FastAPI validates them and documents them in the OpenAPI schema.

A body that does not fit answers 400 ``InvalidParameter`` with one line per problem (see
:mod:`opd_nb.server.responses`); the validators below keep the messages this server always gave.
Models that the server stores (a job's request) allow extra fields, so what the SDK sent round-trips.
Every body is a :class:`Body`: no float field takes ``NaN`` or ``Infinity`` (the body decoder,
:mod:`opd_nb.server.decoding`, already refuses them and 64-bit-plus integers anywhere in the JSON), and
each integer field has the range its consumer can take.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from opd_nb.constants import CANCEL_REASON_MAX_CHARS
from opd_nb.engine.openai_wire import MAX_TOP_LOGPROBS
from opd_nb.server.limits import MAX_ENV_BYTES, MAX_REQUIREMENTS_CHARS
from opd_nb.server.responses import shown
from opd_nb.spec.submit_rules import SIGNAL_FIX, TYPE_BY_HAND_FIX, signal_problem, type_by_hand_problem
from opd_nb.spec.training_plan import TrainingPlan
from opd_nb.wire.deploy_plans import plan_problems
from opd_nb.wire.requests import CancelRequest, ChatRequest, DeploymentCreate, DeploymentScale

_KEY_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
TRAINING_TYPES = ("pg_opd", "reinforcement")
MAX_SEED = 2**31 - 1  # Bailian's documented seed range is 0..2**31-1
MAX_PAGE_NUMBER = 10**9
MAX_CONCURRENCY = 1024  # calls in flight to one function
MAX_TIMEOUT_S = 86_400.0


class Body(BaseModel):
    """The base of every request body: a float field is finite (``NaN``/``Infinity`` are a 400)."""

    model_config = ConfigDict(allow_inf_nan=False)


def _supported_training_type(value: Any) -> Any:
    if value not in TRAINING_TYPES:
        raise ValueError(f"training_type {value!r} is not supported; use 'pg_opd' (OPD) or 'reinforcement'")
    return value


TrainingType = Annotated[Literal["pg_opd", "reinforcement"], BeforeValidator(_supported_training_type)]


def is_unique_key(value: str) -> bool:
    """A function zip's key: it becomes a file name, so only letters, digits, '.', '_', '-'."""
    return bool(_KEY_RE.match(value))


class UploadUrlBody(Body):
    unique_key: str

    @field_validator("unique_key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not is_unique_key(value):
            raise ValueError("unique_key must be a string of letters, digits, '.', '_', '-'")
        return value


class LayerBody(Body):
    layer_name: str | None = Field(default=None, max_length=256)
    requirements_content: str | None = None  # the SDK sends null without a requirements file

    @field_validator("requirements_content")
    @classmethod
    def _requirements_cap(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_REQUIREMENTS_CHARS:
            raise ValueError(
                f"requirements_content is {len(value)} characters; at most {MAX_REQUIREMENTS_CHARS} "
                "(1 MiB) are accepted"
            )
        return value


class RegisterBody(Body):
    """``POST /fine-tunes/create/{rollout|reward|group-reward}``: the zip's file and class."""

    name: str
    unique_key: str
    func: str
    code_url: str | None = None

    @field_validator("name", "unique_key", "func")
    @classmethod
    def _non_empty(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip():
            raise ValueError(f"{info.field_name} is required (a non-empty string)")
        return value

    @field_validator("func")
    @classmethod
    def _class_name(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"func {value!r} is not a Python class name")
        return value


def _env(value: JsonValue) -> JsonValue:
    """A function's environment map: each name and value must be one an ``exec`` can carry.

    A NUL byte (in a name or a value), an ``=`` in a name or an empty name cannot become an
    environment variable (``os.execve`` raised ``ValueError: embedded null byte``: a 500), and a map
    over :data:`MAX_ENV_BYTES` would not fit the exec (E2BIG)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise PydanticCustomError("env", 'must be an object of NAME: value pairs, e.g. {"MY_FLAG": "1"}')
    size = 0
    for name, item in value.items():
        if not name or "=" in name or "\x00" in name:
            raise PydanticCustomError(
                "env",
                "variable name {name} is not allowed: a name is non-empty, without '=' or NUL bytes",
                {"name": shown(name, 60)},
            )
        if item is None or isinstance(item, dict | list):
            raise PydanticCustomError(
                "env",
                "{name} must be a string, number or boolean, got {kind}",
                {"name": shown(name, 60), "kind": type(item).__name__},
            )
        if "\x00" in str(item):
            raise PydanticCustomError(
                "env",
                "the value of {name} has a NUL byte, which no environment variable can hold",
                {"name": shown(name, 60)},
            )
        size += len(f"{name}={item}".encode("utf-8", "surrogatepass")) + 1
    if size > MAX_ENV_BYTES:
        raise PydanticCustomError(
            "env",
            "the variables take {size} bytes; at most {cap} fit a function's environment",
            {"size": size, "cap": MAX_ENV_BYTES},
        )
    return value


EnvMap = Annotated[dict[str, Any] | None, BeforeValidator(_env)]


class FunctionRuntime(Body):
    """The runtime the SDK's ``load`` sends; only ``env`` matters locally."""

    model_config = ConfigDict(extra="allow")

    env: EnvMap = None


class NoParameters(Body):
    """Endpoints the SDK calls with ``{}``: any JSON object is accepted and ignored."""

    model_config = ConfigDict(extra="allow")


class CancelBody(Body, CancelRequest):
    """A cancel's optional body (the SDK sends none): ``reason``, who cancelled and why, one line of text
    that the job's message and log record (`opd watch --guard` sends its rule, values and step)."""

    model_config = ConfigDict(extra="allow")

    reason: str | None = Field(default=None, max_length=CANCEL_REASON_MAX_CHARS)

    @field_validator("reason")
    @classmethod
    def _one_printable_line(cls, value: str | None) -> str | None:
        if value is not None and any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in value):
            raise ValueError("reason must be one line of printable text (no control characters)")
        return (value.strip() or None) if value is not None else None


class InstanceLogQuery(Body):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    page_number: int = Field(default=1, alias="pageNumber", ge=1, le=MAX_PAGE_NUMBER)
    page_size: int = Field(default=100, alias="pageSize", ge=1, le=1000)
    keywords: list[str] | None = None


class DatasetRef(Body):
    """One entry of ``training_datasets``/``validation_datasets``."""

    model_config = ConfigDict(extra="allow")

    type: str | None = None
    data_source_type: str | None = None
    file_id: str | None = None
    file_name: str | None = None


class FunctionRef(Body):
    """One entry of ``rewards``, or the ``rollout``: a registered function and how the job calls it."""

    model_config = ConfigDict(extra="allow")

    reward_id: str | None = None
    rollout_id: str | None = None
    name: str | None = None
    weight: float | None = None
    timeout: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    env: EnvMap = None
    reward_metric_weight: dict[str, float] | None = None


class JobBody(Body):
    """``POST /fine-tunes``: the fields the SDK's OPD and agentic-RL flows send."""

    model_config = ConfigDict(extra="allow")

    model: str
    training_type: TrainingType = "reinforcement"
    teacher_model: str | None = None
    job_name: str | None = None
    training_datasets: list[DatasetRef] = Field(default_factory=list, validate_default=True)  # required
    validation_datasets: list[DatasetRef] = Field(default_factory=list[DatasetRef])
    rewards: list[FunctionRef] = Field(default_factory=list[FunctionRef])
    rollout: FunctionRef | None = None
    hyper_parameters: dict[str, Any] | None = None  # as sent (echoed back); read into `plan`
    resource_config: dict[str, Any] | None = None
    _plan: TrainingPlan = PrivateAttr(default_factory=TrainingPlan)

    @field_validator("training_datasets", "validation_datasets", "rewards", mode="before")
    @classmethod
    def _absent_list(cls, value: Any) -> Any:
        return value or []  # null and [] mean "none", as on the cloud

    @field_validator("rollout", mode="before")
    @classmethod
    def _absent_rollout(cls, value: Any) -> Any:
        return value or None

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model is required (set `model: name:` in config.yaml)")
        return value

    @field_validator("job_name")
    @classmethod
    def _job_name(cls, value: str | None) -> str | None:
        if value is not None and not 1 <= len(value) <= 256:
            raise ValueError("job_name must be a string of 1..256 characters")
        return value

    @field_validator("training_datasets", "validation_datasets")
    @classmethod
    def _one_file(cls, value: list[DatasetRef], info: ValidationInfo) -> list[DatasetRef]:
        kind = (info.field_name or "").removesuffix("_datasets")
        if kind == "training" and not value:
            raise ValueError("training_datasets is empty; upload a training JSONL file first (POST /files)")
        if len(value) > 1:
            raise ValueError(
                f"{kind}_datasets has {len(value)} entries; the local engine takes one {kind} file"
            )
        src = value[0].data_source_type if value else None
        if src not in (None, "file_id"):
            raise ValueError(
                f"{kind}_datasets[0].data_source_type {src!r} is not available locally; upload the file "
                "(data_source_type: file_id with file_name)"
            )
        return value

    @model_validator(mode="after")
    def _hyper_parameters(self) -> JobBody:
        """Read once into the job's typed plan: the spec's table per key, then the rules across keys. The
        plan goes on with the job (its record, then the engine); the body keeps what was sent, to echo."""
        self._plan = TrainingPlan.from_submitted(self.hyper_parameters)  # HyperParameterError: a ValueError
        return self

    @property
    def plan(self) -> TrainingPlan:
        """The typed hyper-parameters of this job (read when the body was)."""
        return self._plan

    @model_validator(mode="after")
    def _training_type(self) -> JobBody:
        """The documented rules of the type (:mod:`opd_nb.spec.submit_rules`): a teacher makes the job pg_opd
        (as the SDK sets it; a type sent by hand against the teacher is refused), pg_opd needs a teacher
        (the SDK's 3006), and a job without a teacher learns from at least one reward."""
        teacher = (self.teacher_model or "").strip() or None
        if "training_type" in self.model_fields_set:
            problem = type_by_hand_problem(self.training_type, teacher)
            if problem is not None:
                raise ValueError(f"{problem}; {TYPE_BY_HAND_FIX}")
        elif teacher is not None:
            self.training_type = "pg_opd"  # what the SDK sends whenever a teacher is given
        if self.training_type == "pg_opd" and teacher is None:
            raise ValueError(
                "training_type 'pg_opd' needs a teacher_model (set `teacher_model:` in config.yaml)"
            )
        problem = signal_problem(teacher, len(self.rewards))
        if problem is not None:
            raise ValueError(f"{problem}; {SIGNAL_FIX}")
        return self


# ---- deployments and inference ----------------------------------------------------------------
MAX_CAPACITY = 8  # locally one process serves a deployment; capacity bounds its batch
_SUFFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
ROLES = ("system", "user", "assistant", "tool")
_MESSAGES_EXAMPLE = 'e.g. [{"role": "user", "content": "Hello"}]'


def _capacity(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"capacity must be a whole number of instances (1..{MAX_CAPACITY}), got {value!r}")
    if not 1 <= value <= MAX_CAPACITY:
        raise ValueError(
            f"capacity {value} is out of range: a deployment needs 1..{MAX_CAPACITY} instances "
            "(use capacity=1 for a first deployment)"
        )
    return value


Capacity = Annotated[int, BeforeValidator(_capacity)]


def check_messages(value: JsonValue, where: str = "messages") -> list[dict[str, Any]]:
    """A chat history: a non-empty list of ``{"role", "content"}`` objects (the message says how to fix it)."""
    if not isinstance(value, list) or not value:
        raise ValueError(
            f"{where} must be a non-empty list of {{role, content}} objects, {_MESSAGES_EXAMPLE}"
        )
    checked: list[dict[str, Any]] = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict):
            raise ValueError(f"{where}[{i}] must be an object with role and content, {_MESSAGES_EXAMPLE}")
        role = msg.get("role")
        if role not in ROLES:
            raise ValueError(f"{where}[{i}].role {role!r} is not one of {', '.join(ROLES)}")
        content = msg.get("content")
        if content is None and not (role == "assistant" and msg.get("tool_calls")):
            raise ValueError(f"{where}[{i}] ({role}) has no content; give it a string, {_MESSAGES_EXAMPLE}")
        if content is not None and not isinstance(content, str | list):
            raise ValueError(f"{where}[{i}].content must be a string (or a list of text parts)")
        checked.append(_text_content(msg, f"{where}[{i}]"))
    return checked


def _part_type(part: JsonValue) -> str | None:
    """A content part's type: OpenAI's ``type``, else DashScope's one key (``{"text": ...}``, ``{"image": ...}``)."""
    if not isinstance(part, dict):
        return None
    given = part.get("type")
    return str(given) if given else ("text" if "text" in part else next(iter(part), None))


def _text_content(msg: dict[str, Any], where: str) -> dict[str, Any]:
    """The message with a list of text parts joined into one string (by newlines, as vLLM joins them);
    any other part (``image_url``, ``input_audio``, DashScope's ``{"image": ...}``) is a 400 that names
    it: the local models read text only, and a part dropped without a word would answer another question."""
    parts: JsonValue = msg.get("content")
    if not isinstance(parts, list):
        return msg
    texts: list[str] = []
    for j, part in enumerate(parts):
        kind = _part_type(part)
        if kind != "text":
            what = f"a part of type {shown(kind, 40)}" if kind else f"not a text part ({type(part).__name__})"
            raise ValueError(
                f"{where}.content[{j}] is {what}; the local models read text only: send "
                '{"type": "text", "text": "..."} parts (or a string), or run against Bailian'
            )
        if not isinstance(part, dict) or not isinstance(
            text := part.get("text"), str
        ):  # a dict: its kind is text
            raise ValueError(f"{where}.content[{j}].text must be a string")
        texts.append(text)
    return {**msg, "content": "\n".join(texts)}


MAX_TEMPERATURE = 2.0  # the documented maximum (compatible mode: [0, 2]; DashScope: [0, 2))
MAX_N = 4  # choices per request (each one is a decode on the local model)
MAX_STOP = 4  # stop strings, as OpenAI and Bailian allow
# Options a caller may send that the local models cannot honour, with the value that means "off":
# anything else is a 400 that says so (never a silent drop that passes locally and differs on the cloud).
UNSUPPORTED = {
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "repetition_penalty": 1,
    "logit_bias": None,
    "response_format": None,
    "top_k": None,
    "enable_search": False,
    "enable_thinking": False,
}


def _is_off(value: Any, off: Any) -> bool:
    """Whether an unsupported option's value means "off": absent, null, or ``off`` of its own type
    (``false`` is no ``presence_penalty`` of 0, nor ``0`` an ``enable_thinking`` of false)."""
    if value is None:
        return True
    if isinstance(off, bool) or isinstance(value, bool):
        return value is off
    return isinstance(value, int | float) and isinstance(off, int | float) and value == off


def _stop(value: JsonValue) -> JsonValue:
    if value is None or isinstance(value, str):
        return [value] if value else None
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value) or len(value) > MAX_STOP:
        raise ValueError(f"stop must be a string or a list of at most {MAX_STOP} strings")
    return value or None


Stop = Annotated[list[str] | None, BeforeValidator(_stop)]


class Sampling(Body):
    """``n``, ``logprobs``/``top_logprobs`` and ``stop``, as Bailian documents them for both chat APIs."""

    model_config = ConfigDict(extra="allow")

    n: int = Field(default=1, ge=1, le=MAX_N, strict=True)
    logprobs: StrictBool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS, strict=True)
    stop: Stop = None

    @model_validator(mode="after")
    def _supported(self) -> Sampling:
        extra = self.model_extra or {}
        for key, off in UNSUPPORTED.items():
            if not _is_off(extra.get(key), off):
                raise ValueError(
                    f"{key} is not supported by the local models (got {extra[key]!r}); leave it out "
                    "locally, or run against Bailian"
                )
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=true")
        if getattr(self, "stream", False) and (self.n > 1 or self.logprobs or self.stop):
            raise ValueError(
                "n > 1, logprobs and stop are not supported with stream on the local plane; drop stream"
            )
        return self

    def sampling(self) -> dict[str, Any]:
        """What the serving process is sent (nothing when every option is off)."""
        out: dict[str, Any] = {"n": self.n if self.n > 1 else None, "stop": self.stop}
        if self.logprobs:
            out.update(logprobs=True, top_logprobs=self.top_logprobs or 0)
        return out


class DeploymentBody(Body, DeploymentCreate):
    """``POST /deployments`` as ``Deployments.call(model, capacity, suffix=...)`` and the v2
    ``client.deployments.create`` send it (``plan`` and the fields it needs: :mod:`opd_nb.wire.deploy_plans`)."""

    model_config = ConfigDict(extra="allow")

    capacity: (
        Capacity  # the wire's fields, with the local plane's range (the rest as `DeploymentCreate` declares)
    )

    @model_validator(mode="after")
    def _plan_fields(self) -> DeploymentBody:
        problems = plan_problems(self.plan, self.deploy_spec, self.billing_method)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def plan_fields(self) -> dict[str, Any]:
        keys = ("plan", "deploy_spec", "billing_method", "template_id")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    @field_validator("model_name")
    @classmethod
    def _model(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model_name is required: the model to deploy (e.g. opd-local/<job_id>)")
        return value.strip()

    @field_validator("suffix")
    @classmethod
    def _suffix(cls, value: str | None) -> str | None:
        if value is not None and not _SUFFIX_RE.match(value):
            raise ValueError("suffix must be 1..64 letters, digits, '_' or '-' (it becomes part of the name)")
        return value


class ScaleBody(Body, DeploymentScale):
    """``PUT /deployments/{name}/scale``."""

    model_config = ConfigDict(extra="allow")

    capacity: Capacity
    deployed_model: str | None = None


class GenerationInput(Body):
    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, value: Any) -> Any:
        return None if value is None else check_messages(value, "input.messages")

    @model_validator(mode="after")
    def _something(self) -> GenerationInput:
        if not self.messages and not (self.prompt or "").strip():
            raise ValueError(f"input needs messages (or a prompt), {_MESSAGES_EXAMPLE}")
        return self

    def chat(self) -> list[dict[str, Any]]:
        """The conversation: the messages, with a prompt as a last user turn."""
        msgs = list(self.messages or [])
        if (self.prompt or "").strip():
            msgs.append({"role": "user", "content": self.prompt})
        return msgs


class GenerationParameters(Sampling):
    """DashScope text generation's ``parameters`` (the unsupported ones are a 400, see ``UNSUPPORTED``)."""

    result_format: Literal["text", "message"] = "text"
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    temperature: float | None = Field(
        default=None, ge=0, lt=MAX_TEMPERATURE, strict=True
    )  # DashScope's [0, 2)
    top_p: float | None = Field(default=None, gt=0, le=1, strict=True)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, strict=True)
    incremental_output: StrictBool = False
    stream: StrictBool | None = None
    tools: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _choices_are_messages(self) -> GenerationParameters:
        if self.n > 1 and self.result_format != "message":
            raise ValueError('n > 1 needs result_format="message" (each choice is a message)')
        return self


class GenerationBody(Body):
    """``POST /services/aigc/text-generation/generation`` as ``Generation.call`` sends it."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: GenerationInput
    parameters: GenerationParameters = Field(default_factory=GenerationParameters)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model is required: a base model id or a deployed model name")
        return value.strip()


class ChatBody(Sampling, ChatRequest):
    """``POST /compatible-mode/v1/chat/completions`` (OpenAI's chat body; the unsupported options are a 400)."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True)
    temperature: float | None = Field(default=None, ge=0, le=MAX_TEMPERATURE, strict=True)  # OpenAI's [0, 2]
    top_p: float | None = Field(default=None, gt=0, le=1, strict=True)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, strict=True)
    stream: StrictBool = False
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, value: Any) -> Any:
        return check_messages(value)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model is required: a base model id or a deployed model name")
        return value.strip()
