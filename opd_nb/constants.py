"""Facts that several layers share, defined once: job statuses, default URLs, estimator and metric names.

The engine writes these metric names, the server stores them, the client, the plots, the monitor and
`opd watch` read them; a rename here is a rename everywhere. Bailian's names are kept verbatim.
"""

from __future__ import annotations

# Job statuses (Bailian's fine-tune API).
PENDING = "PENDING"
RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
CANCELED = "CANCELED"
TERMINAL_STATUSES = frozenset({SUCCEEDED, FAILED, CANCELED})
UNKNOWN = "UNKNOWN"  # what a record reads as before the control plane has said its status

# Deployment statuses (Bailian's deployments API): PENDING, RUNNING and FAILED as above, and DELETED.
UPDATING = "UPDATING"  # a running deployment being scaled (Bailian): it serves again when done
DELETED = "DELETED"  # also what a deleted job or file reads as (a delete's answer, a stream's last event)
DEPLOYMENT_STATUSES = (PENDING, RUNNING, FAILED, DELETED)

# Where jobs go.
LOCAL_HOST = "127.0.0.1"
LOCAL_PORT = 8765
API_PATH = "/api/v1"
COMPATIBLE_PATH = "/compatible-mode/v1"  # the OpenAI-compatible API, beside API_PATH (as on Bailian)
DEFAULT_LOCAL_API = f"http://{LOCAL_HOST}:{LOCAL_PORT}{API_PATH}"
DEFAULT_CLOUD_API = "https://dashscope.aliyuncs.com/api/v1"
LOCAL_API_KEY = "local"  # the placeholder key a local control plane without a server key accepts
CANCEL_REASON_MAX_CHARS = (
    1000  # who cancelled a local job and why (the cancel body's `reason`, opd serve only)
)
LOCAL_OUTPUT_PREFIX = "opd-local/"  # + job id: a finished local job's finetuned_output (continues training)

# What the workspace's own submit_job.py shares with the package. It runs with only the SDK, so it keeps these
# as literals in a block generated from here (python -m opd_nb.workspace.template_keys --write; a test checks).
SUBMIT_RESULT_PROTOCOL = 1  # the version of the result submit_job.py writes to --result-file
SMOKE_STEPS = 2  # a smoke run's default training rows: enough for this many steps
SMOKE_VALIDATION_ROWS = 4  # validation rows a smoke run keeps
SMOKE_SUFFIX = "-smoke"  # appended to a smoke run's job name
# A paid start's client-chosen request id: PREFIX + HEX hex digits, carried in the job name it submits
# (NAME-rid-<8 hex>), to find the start again when its answer is lost (opd_nb.paid.consent, submit_job.py).
REQUEST_ID_PREFIX = "r"
REQUEST_ID_HEX = 10
ENTITY_STATE_DIR = (
    ".opd"  # remembered function entities (also added to FC_ZIP_EXCLUDE_PATTERNS: never zipped)
)
ENTITY_STATE_FILE = "entities.json"
ENTITY_STATE_NOTE = (
    "Functions registered by submit_job.py, reused while the code is unchanged. No secrets. "
    "Delete this file (or pass --fresh) to register again."
)
SDK_ZIP_EXCLUDES = (  # the default of the SDK's FC_ZIP_EXCLUDE_PATTERNS (dashscope 2.0.2)
    ".git,.gitignore,.DS_Store,.vscode,.Python,.env,.venv,.idea,__pycache__,*.swp,*.egg,"
    "*.egg-info,*.pyc,*.md,*.log,*.tmp,*.bak,build,develop-eggs,.eggs,test,tests,tmp,temp,data"
)
# What a generated workspace leaves out of its function zip when the user set no FC_ZIP_EXCLUDE_PATTERNS: the
# SDK's defaults, the remembered entities, notebooks (they change with every save, and the code hash with
# them) and the job's own files (the config and submit_job.py are not the function's). A user's own
# FC_ZIP_EXCLUDE_PATTERNS is kept as written (only the state dir is added to it).
WORKSPACE_ZIP_EXCLUDES = f"{SDK_ZIP_EXCLUDES},{ENTITY_STATE_DIR},*.ipynb,.ipynb_checkpoints,submit_job.py,config.yaml,config_*.yaml"
SDK_GENERATED_FILES = ("start.sh",)  # written into zipdir by the SDK for each function just before zipping
# Environment knobs the SDK bakes into the generated start.sh: part of "what would be zipped".
SDK_START_SCRIPT_ENV = (
    "FC_PYPI_LIB",
    "FC_PYPI_REPO",
    "FC_SERVER_CLASSPATH",
    "FC_WORKERS_COUNT",
    "FC_LAYER_USED",
)

# The local engine's loss estimators, by name: what `opd check`, the server and the engine accept. The
# engine's registry (engine/estimators.py: REGISTRY) has a class for each and checks so at import.
CLOUD_ESTIMATOR = "pg_opd"  # the cloud's (the default)
LOCAL_ESTIMATORS = (
    "gkd",
)  # only on the local engine, where `algorithm` may name them (the spec's local choices)

# Metric names (Bailian's, plus the local engine's extras).
EPOCH = "epoch"  # in every row the engine writes (its step's own numbers), never in the trace intake's
LOSS = "actor/distillation/loss"
VALID_TOKEN_RATE = "trace/distillation/valid_token_rate"
REWARD_MEAN = "validation/data/reward/mean@1"
VALIDATION_ACCURACY = "validation/accuracy"
LEARNING_RATE = "actor/lr"
TOKENS_PER_S = "perf/tokens_per_s"
STEP_SECONDS = (
    "timing_s/step"  # a step's wall time; times TOKENS_PER_S: the tokens it processed (a job's usage)
)
GRAD_NORM = "actor/grad_norm"
REWARD_FAILURE_RATE = "trace/reward/failure_rate"  # share of reward calls that raised or timed out
REWARD_METRIC_PREFIX = "trace/reward_metrics/"  # + the reward function's own metric key
ROLLOUT_METRIC_PREFIX = "trace/rollout_metrics/"  # + each key of the rollout function's rollout_metrics
ENTROPY = "actor/entropy"  # mean full-vocabulary entropy of the student at its sampled tokens
TEACHER_KL = "trace/distillation/teacher_kl"  # mean log pi_s - log pi_t on teacher-scored sampled tokens (k1)
ZERO_VARIANCE_GROUPS = "trace/reward/zero_variance_groups"  # share of prompts whose rollouts all scored alike
TRAIN_REWARD_MEAN = "trace/reward/mean"  # mean reward of the step's sampled rollouts (failed calls left out)
TRUNCATED_FRACTION = "completions/truncated_fraction"  # share of the step's samples cut off at max_length
ROLLOUT_FAILURE_RATE = "trace/rollout/failure_rate"  # share of a round's rollout calls that failed
VALIDATION_RECORD_SECONDS = "timing_s/validation_record"  # time spent writing the validation rollout records
PG_CLIPFRAC = "actor/pg_clipfrac"  # share of trained tokens whose policy ratio was clipped
PPO_KL = "actor/ppo_kl"  # mean k1 estimate of KL(old policy || new policy) on trained tokens
RESPONSE_LENGTH = "response_length/mean"  # mean number of trained (student-generated) tokens per sample
GEN_SECONDS = "timing_s/gen"  # a step's rollout stage: sampling (native) or the rollout function (agentic)
TEACHER_SECONDS = "timing_s/teacher"  # a step's teacher scoring (the reward functions run beside it)
REWARD_SECONDS = "timing_s/reward"  # the reward functions' own time (overlapping the teacher's)
UPDATE_SECONDS = "timing_s/update"  # a step's optimizer updates
RECORD_SECONDS = "timing_s/record"  # a step's rollout records
# From the SDK's own spans of a step's calls (opd serve receives them; Bailian's dictionary names none of
# these, so they sit under trace/ beside the rollout function's own metrics).
TOOL_METRIC_PREFIX = "trace/tool/"  # + a tool's name + "/latency_p50_s", "/latency_p95_s" or "/error_rate"
TOOL_ERROR_RATE = "trace/tool/error_rate"  # share of the step's tool spans that failed (every tool)
TOOL_LATENCY_P95 = "trace/tool/latency_p95_s"  # 95th percentile of the step's tool span durations, seconds
LLM_CALLS_PER_TRAJECTORY = "trace/llm/calls_per_trajectory"  # mean LLM spans per traced rollout call
TRACE_REFUSED_EXPORTS = (
    "trace/refused_exports"  # the job's span exports opd serve refused so far (running total)
)
TRACE_REJECTED_SPANS = "trace/rejected_spans"  # spans opd serve left out of the job's accepted exports so far
