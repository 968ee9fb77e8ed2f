"""Config rules: everything in config.yaml the SDK accepts but the job would pay for later."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from opd_nb.checks.context import CheckContext, as_number
from opd_nb.checks.report import Severity
from opd_nb.spec.hyperparams import OTHER_NAMES, PARAMS_BY_NAME, closest
from opd_nb.spec.ids import id_kind
from opd_nb.spec.models import (
    OPD_TEACHER_IDS,
    documented,
    family,
    placeholder,
    size_b,
    size_class,
)
from opd_nb.spec.submit_rules import (
    EMPTY_FUNCTIONS,
    EMPTY_FUNCTIONS_FIX,
    NEEDS_A_SIGNAL,
    SIGNAL_FIX,
    TEACHER_ID,
    TYPE_BY_HAND,
    TYPE_BY_HAND_FIX,
    empty_functions_problem,
    signal_problem,
    teacher_problem,
    type_by_hand_problem,
)
from opd_nb.spec.training_plan import training_steps
from opd_nb.spec.yaml_edit import yaml_scalar
from opd_nb.wire import http_client

LR_START = 1e-6
LR_FAR_ABOVE = 1e-5  # 10x the documented start
_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_PARSE_RULES = {
    "syntax": "config.yaml-syntax",
    "yaml-tab": "config.yaml-tab",
    "yaml-multiple-documents": "config.yaml-multiple-documents",
    "empty": "config.empty",
    "functions-null": "config.functions-null",
    "name": "config.job-name",
    "schema": "config.schema",
    "misplaced": "config.misplaced-key",
}


def check_config(ctx: CheckContext) -> None:
    """Rules that need only the config (and the target)."""
    rep = ctx.report
    for p in ctx.parsed.problems:
        if any(p.path[:n] in ctx.explained for n in range(1, len(p.path) + 1)):
            continue  # a YAML rule already said what the loader made of this value
        rep.add(_PARSE_RULES.get(p.kind, "config.schema"), "error", p.where, p.message, p.fix)
    if not ctx.raw:
        return
    _job_name(ctx)
    _models(ctx)
    _hyper_parameters(ctx)
    _resources(ctx)
    _functions(ctx)
    _datasets(ctx)


def check_config_with_data(ctx: CheckContext) -> None:
    """Rules that need the number of training rows (set by the data rules)."""
    if ctx.train_rows is None or not ctx.raw:
        return
    batch, _ = ctx.hp_value("batch_size")
    epochs, _ = ctx.hp_value("n_epochs")
    eval_steps, eval_set = ctx.hp_value("eval_steps")
    if not batch or not epochs or not eval_steps or batch <= 0 or ctx.train_rows <= batch:
        return  # rows <= batch_size is data.too-few-rows: the platform refuses the file, no steps to count
    steps = training_steps(ctx.train_rows, int(batch), int(epochs))
    if eval_steps * 3 > steps:
        where = (
            ctx.where(("training", "hyper_parameters", "eval_steps"))
            if eval_set
            else ctx.where(("training", "hyper_parameters"))
        )
        suggestion = max(1, steps // 3)
        ctx.report.add(
            "config.eval-steps-too-sparse",
            "warning",
            where,
            f"eval_steps={int(eval_steps)}{'' if eval_set else ' (default)'} gives fewer than 3 evaluations in "
            f"{steps} step(s) ({ctx.train_rows} rows / batch_size {int(batch)} x {int(epochs)} epoch(s)); the docs "
            "need >= 3 evaluation points to judge a trend",
            f"set eval_steps <= {suggestion}, or add data / epochs",
        )


def _job_name(ctx: CheckContext) -> None:
    name = ctx.raw.get("name")
    if isinstance(name, str) and name and not name.strip():
        ctx.report.add(
            "config.job-name",
            "error",
            ctx.where(("name",)),
            "the job name is blank",
            "set `name:` to a short id such as my-opd-job",
        )
    elif isinstance(name, str) and re.search(r"\s", name):
        ctx.report.add(
            "config.job-name",
            "warning",
            ctx.where(("name",)),
            f"the job name {name!r} contains spaces",
            "use letters, digits, - and _ only",
        )


def _looks_local(ident: str, ctx: CheckContext) -> str | None:
    """Why a model id looks like a Hugging Face repo or a filesystem path (None if it does not)."""
    if id_kind(ident) == "local-output":
        return "a local job's output model (opd-local/…), which only `opd serve` knows"
    if ident.startswith(("/", "./", "../", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", ident):
        return "a filesystem path"
    if _HF_REPO.match(ident):
        return "a Hugging Face repo id" if not ctx.resolve(ident).exists() else "a local path"
    if ctx.resolve(ident).is_dir() and "/" in ident:
        return "a local path"
    return None


def _models(ctx: CheckContext) -> None:
    raw = ctx.raw
    model = raw.get("model")
    student = model.get("name") if isinstance(model, dict) else None
    teacher = raw.get("teacher_model")
    training = given if isinstance(given := raw.get("training"), dict) else {}
    rep = ctx.report
    not_a_mapping = model is not None and not isinstance(model, dict)  # already a config.schema error
    if not student and not not_a_mapping and ("model",) not in ctx.explained:
        rep.add(
            "config.model-missing",
            "error",
            ctx.where(("model",)) if "model" in raw else ctx.config_name,
            "no student model: the SDK silently leaves `model` out of the request and the service rejects the job",
            "add `model: {name: qwen3-8b}` (a Bailian model id)",
        )
    _submit_contract(ctx, teacher if isinstance(teacher, str) else None, training.get("type"))
    if not teacher:
        if training.get("type") == "pg_opd":
            rep.add(
                "config.teacher-missing",
                "error",
                ctx.where(("training", "type")),
                "`training.type: pg_opd` without `teacher_model`: the SDK refuses to submit (error 3006)",
                "add `teacher_model: <Bailian model id>` (a teacher switches the job to pg_opd by itself)",
            )
        elif ctx.has_reward:
            rep.add(
                "config.no-teacher",
                "warning",
                ctx.where(("training",)) if "training" in raw else ctx.config_name,
                "no `teacher_model`: this would run as plain reinforcement learning, not distillation",
                "add `teacher_model: <Bailian model id>` to run OPD",
            )
    ids = [(("model", "name"), student), (("teacher_model",), teacher)]
    for path, ident in ids:
        if not isinstance(ident, str) or not ident:
            continue
        role = "teacher_model" if path == ("teacher_model",) else "model.name"
        if role == "teacher_model" and _unknown_teacher(ctx, path, ident):
            continue  # the submit contract's teacher rule, as the local plane answers it too
        if _placeholder_id(ctx, path, role, ident):
            continue
        if id_kind(ident) not in (None, "local-output"):
            continue  # a job, checkpoint, file or function id: the identifier rules say what it is
        if ctx.target == "cloud":
            why = _looks_local(ident, ctx)
            if why:
                rep.add(
                    "config.model-id-not-cloud",
                    "error",
                    ctx.where(path),
                    f"{role} {ident!r} looks like {why}; Bailian accepts only its own model ids (the FAQ's most "
                    "common teacher_model error)",
                    "use a Bailian model id (e.g. qwen3.5-9b / qwen3.5-397b-a17b), or check with --target local",
                )
        else:
            _local_model(ctx, path, role, ident)
    if isinstance(teacher, str) and teacher and not placeholder(teacher):
        _teacher_choice(ctx, student if isinstance(student, str) else "", teacher)


def _submit_contract(ctx: CheckContext, teacher: str | None, training_type: Any) -> None:
    """The documented submit rules the local control plane enforces too (:mod:`opd_nb.spec.submit_rules`)."""
    rep = ctx.report
    by_hand = type_by_hand_problem(training_type, teacher) if isinstance(training_type, str) else None
    if by_hand is not None:
        rep.add(TYPE_BY_HAND.rule, "error", ctx.where(("training", "type")), by_hand, TYPE_BY_HAND_FIX)
    no_signal = signal_problem(teacher, len(ctx.function_kinds() - {"rollout"}))
    if (
        no_signal is not None and training_type != "pg_opd"
    ):  # pg_opd without a teacher: config.teacher-missing
        where = ctx.where(("functions",)) if "functions" in ctx.raw else ctx.config_name
        rep.add(NEEDS_A_SIGNAL.rule, "error", where, no_signal, SIGNAL_FIX)
    empty = empty_functions_problem(ctx.raw.get("functions"))
    if empty is not None and teacher:
        rep.add(EMPTY_FUNCTIONS.rule, "warning", ctx.where(("functions",)), empty, EMPTY_FUNCTIONS_FIX)


def _cloud_style(ident: str) -> bool:
    """An id of the form Bailian's are (no path, no repo, no local output): what ``teacher_problem`` judges."""
    return not ("/" in ident or ident.startswith(("~", ".")) or id_kind(ident) is not None)


def _unknown_teacher(ctx: CheckContext, path: tuple[str, ...], ident: str) -> bool:
    """A cloud-style teacher id Bailian does not have (TEACHER_ID), as Bailian and the local plane refuse it.
    Locally the plane answers first: an id it serves (``--model-map``) passes. True when reported."""
    if not _cloud_style(ident):
        return False  # a path, a repo id or a local output: the model-id rules below
    problem = teacher_problem(ident)
    if problem is None:
        return False
    if ctx.target == "local":
        _local_model(ctx, path, "teacher_model", ident, quiet_404=True)
        if ident in ctx.local_models:
            return False  # the plane maps it to a model of its own
    ctx.report.add(_TEACHER_RULES[problem.kind], "error", ctx.where(path), problem.message, problem.fix)
    return True


_TEACHER_RULES = {
    "placeholder": "config.model-placeholder",
    "other-vendor": "config.teacher-not-bailian",
    "unknown": TEACHER_ID.rule,
}


def _placeholder_id(ctx: CheckContext, path: tuple[str, ...], role: str, ident: str) -> bool:
    """A model id left as the docs' blank (seed 001's `your-teacher-model-id`): an error on every target,
    since the local plane would train on its stand-in and hide it. True when reported."""
    if not placeholder(ident):
        return False
    example = OPD_TEACHER_IDS[0] if role == "teacher_model" else "qwen3.5-9b"
    ctx.report.add(
        "config.model-placeholder",
        "error",
        ctx.where(path),
        f"{role} {ident!r} is a placeholder to fill in, not a model id: Bailian refuses it (a model ID not "
        "registered in Bailian)"
        + (
            ", and so does the local control plane"
            if role == "teacher_model"
            else "; the local control plane would quietly train its stand-in instead"
        ),
        f"write a Bailian model id, e.g. {role}: {example}",
    )
    return True


def _teacher_documented(ctx: CheckContext, student: str, teacher: str) -> None:
    """The docs' teacher constraints beyond the id's form: a documented OPD teacher, the student's family."""
    where = ctx.where(("teacher_model",))
    t_family, s_family = family(teacher), family(student)
    if documented(student) and t_family and s_family and t_family != s_family:
        ctx.report.add(
            "config.teacher-family",
            "warning",
            where,
            f"teacher_model {teacher!r} ({t_family}) and the student {student!r} ({s_family}) are different model "
            "families: the docs require tokenizers that align token by token (e.g. both Qwen3.5), else the "
            "teacher's per-token scores do not line up and distillation gives no signal",
            f"pick a teacher of the student's family ({s_family}), e.g. {OPD_TEACHER_IDS[0]}",
        )
    if ctx.target == "cloud" and teacher.strip().lower() not in OPD_TEACHER_IDS:
        ctx.report.add(
            "config.teacher-undocumented",
            "warning",
            where,
            f"teacher_model {teacher!r} is not a model Bailian documents as an OPD teacher "
            f"(documented: {', '.join(OPD_TEACHER_IDS)}); the service may refuse it (400 InvalidParameter) "
            "after the upload",
            f"use a documented teacher ({', '.join(OPD_TEACHER_IDS)}), or confirm in the Bailian console that "
            f"{teacher!r} is enabled for your account as a teacher",
        )


def _teacher_choice(ctx: CheckContext, student: str, teacher: str) -> None:
    """A teacher Bailian cannot serve, one smaller than the student it should teach, or one the docs do not
    document for OPD."""
    where = ctx.where(("teacher_model",))
    if _cloud_style(teacher) and teacher_problem(teacher) is not None:
        return  # not a teacher Bailian has: _unknown_teacher's error, or an id the local plane maps
    t_size, s_size = size_b(teacher), size_b(student)
    if t_size is not None and s_size is not None and t_size < s_size:
        ctx.report.add(
            "config.teacher-smaller",
            "warning",
            where,
            f"teacher_model {teacher!r} ({t_size:g}B) is smaller than the student {student!r} ({s_size:g}B): "
            "the student is pulled towards a weaker model",
            "pick a teacher larger than the student (the teacher should be the task's upper limit)",
        )
    if not (ctx.target == "cloud" and _looks_local(teacher, ctx)):  # a repo id or path is an error already
        _teacher_documented(ctx, student, teacher)


def _local_model(
    ctx: CheckContext, path: tuple[str, ...], role: str, ident: str, *, quiet_404: bool = False
) -> None:
    """Ask the local control plane whether it can serve this id (GET {base}/models/{id})."""
    import httpx

    base = ctx.api_base()
    if ctx.local_models.get("__unreachable__"):
        return
    from urllib.parse import quote

    try:
        resp = http_client.get(
            f"{base}/models/{quote(ident, safe='/')}",
            timeout=5.0,
            trust_env=False,
            params={"role": "teacher" if role == "teacher_model" else "student"},
            headers={"Authorization": f"Bearer {ctx.api_key()}"},
        )
    except httpx.HTTPError as exc:
        ctx.local_models["__unreachable__"] = True
        ctx.report.add(
            "env.local-server-unreachable",
            "warning",
            base,
            f"no local control plane answers at {base} ({type(exc).__name__}); model ids not verified",
            "start it with `opd serve start` (or pass --base-url)",
        )
        return
    if resp.status_code == 200:
        ctx.local_models[ident] = resp.json()
        return
    if resp.status_code == 404:
        if quiet_404:
            return  # the caller reports the rule the plane applied
        try:
            detail = resp.json().get("message") or ""
        except ValueError:
            detail = resp.text[:200]
        ctx.report.add(
            "config.model-not-servable",
            "error",
            ctx.where(path),
            f"the local control plane cannot serve {role} {ident!r}" + (f": {detail}" if detail else ""),
            "use an id from `GET /api/v1/models`, or map it with `opd serve --model-map ID=PATH`",
        )
        return
    ctx.local_models["__unreachable__"] = True
    ctx.report.add(
        "env.local-server-unreachable",
        "warning",
        base,
        f"the local control plane answered HTTP {resp.status_code} for {role} {ident!r}; model ids not "
        "verified",
        "check `opd serve status` and --base-url",
    )


# What is known of a number sent as a string: the official Bailian CLI (`bl finetune`) sends the learning
# rate as a string on purpose, "to avoid JSON number precision loss" (reference/bailian-lifecycle-2026.md),
# so the service reads that one; for any other key the docs do not say. The local plane reads both.
STRING_SENT_BY_BAILIAN_CLI = frozenset({"learning_rate"})


def _string_on_the_wire(key: str) -> tuple[Severity, str]:
    """How sure a string number is to be read as one: (severity, what is known)."""
    if key in STRING_SENT_BY_BAILIAN_CLI:
        return "info", (
            "the official Bailian CLI sends learning_rate as a string itself (to keep its precision), so the "
            "service reads it, and so does the local plane"
        )
    return "warning", (
        "the docs do not say whether Bailian reads a string as a number here (its official CLI sends only "
        "learning_rate as one); the local plane reads it as a number"
    )


def _numeric_string(ctx: CheckContext, section: str, key: str, value: Any) -> bool:
    if isinstance(value, str) and as_number(value) is not None:
        spec = PARAMS_BY_NAME.get(key)
        if spec is None or spec.type in ("int", "float"):
            num = as_number(value)
            if spec is not None and spec.type == "int" and num is not None and float(num).is_integer():
                fix = f"write {key}: {int(num)} (no quotes)"
            elif "e" in value.lower() and num is not None:
                fix = (
                    f"write {key}: {yaml_scalar(float(num))} (no quotes; YAML 1.1 reads an exponent as a number "
                    "only with a dot in the mantissa and a sign: 1.0e-6, 1.0e+3)"
                )
            else:
                fix = f"write {key}: {value.strip()} without quotes"
            severity, known = _string_on_the_wire(key)
            ctx.report.add(
                "config.numeric-string",
                severity,
                ctx.where(("training", section, key)),
                f"{key} is the string {value!r}, not a number: YAML reads it as text and the service gets a "
                f"string; {known}",
                fix,
            )
            return True
    return False


def _hyper_parameters(ctx: CheckContext) -> None:
    """Each key on its own, then the rules that relate several keys."""
    for key, value in ctx.hp.items():
        _hyper_parameter(ctx, key, value)
    _learning_rate(ctx)
    _batch_shape(ctx)
    _lengths(ctx)


def _hyper_parameter(ctx: CheckContext, key: str, value: Any) -> None:
    rep = ctx.report
    hp = ctx.hp
    path = ("training", "hyper_parameters", key)
    if path in ctx.explained:
        return  # a YAML rule said what the loader made of this key or value
    spec = PARAMS_BY_NAME.get(key)
    if spec is None or spec.section != "hyper_parameters":
        if spec is not None:
            rep.add(
                "config.misplaced-key",
                "error",
                ctx.where(path),
                f"`{key}` is a resource, not a hyper-parameter: the service ignores it here",
                f"move `{key}` under `training.resources`",
            )
            return
        near = closest(key, "hyper_parameters")
        if near and near not in hp:
            other = OTHER_NAMES.get(key.lower()) == near
            rep.add(
                "config.unknown-hyperparameter",
                "error",
                ctx.where(path),
                f"unknown hyper-parameter `{key}`"
                + (" (another trainer's name)" if other else "")
                + f": the service ignores it without a word (so {near} keeps its default)",
                f"did you mean `{near}`?" + (" (OPD's name for it)" if other else ""),
            )
        else:
            rep.add(
                "config.unknown-hyperparameter",
                "warning",
                ctx.where(path),
                f"unknown hyper-parameter `{key}`: the service ignores it without a word",
                f"remove it{f' (closest known key: `{near}`)' if near else ''}; see `opd_nb.spec.PARAMS`",
            )
        return
    if value is None:
        return  # dropped by the SDK (the YAML rules say so)
    _check_value(
        rep,
        ctx,
        "hyper_parameters",
        key,
        value,
        spec,
        path,
        f"allowed: {spec.range_text()}; starting point {spec.small!r}",
    )
    if key == "kl_loss_coef":
        rep.add(
            "config.kl-loss-coef",
            "info",
            ctx.where(path),
            "kl_loss_coef is accepted but not consumed by OPD (the learning rate alone sets how fast the "
            "student moves)",
            "remove it, or leave it: it has no effect",
        )


def _learning_rate(ctx: CheckContext) -> None:
    rep = ctx.report
    lr = as_number(ctx.hp.get("learning_rate"))
    if lr is not None and lr > LR_FAR_ABOVE:
        local = ctx.target == "local"
        rep.add(
            "config.learning-rate-high",
            "info" if local else "warning",
            ctx.where(("training", "hyper_parameters", "learning_rate")),
            f"learning_rate {lr:g} is {lr / LR_START:.0f}x the documented 1e-6 start: distillation refines "
            "existing skills and a large rate breaks the output format"
            + (" (fine for the tiny local models)" if local else ""),
            "start at 1.0e-6 and change one variable at a time",
        )


def _batch_shape(ctx: CheckContext) -> None:
    rep = ctx.report
    batch, b_set = ctx.hp_value("batch_size")
    n_roll, n_set = ctx.hp_value("n_rollouts")
    mini, m_set = ctx.hp_value("ppo_mini_batch_size")
    if batch and n_roll and mini and (b_set or n_set or m_set) and mini > batch * n_roll:
        defaults = [k for k, s in (("batch_size", b_set), ("n_rollouts", n_set)) if not s]
        note = f" ({', '.join(defaults)} at the default)" if defaults else ""
        rep.add(
            "config.mini-batch-too-large",
            "error",
            ctx.where(("training", "hyper_parameters", "ppo_mini_batch_size")),
            f"ppo_mini_batch_size {int(mini)} > batch_size {int(batch)} x n_rollouts {int(n_roll)} = "
            f"{int(batch * n_roll)} samples per step{note}",
            f"set ppo_mini_batch_size <= {int(batch * n_roll)} (or raise batch_size / n_rollouts)",
        )
    if ctx.has_reward and n_roll is not None and n_roll <= 1:
        rep.add(
            "config.reward-single-rollout",
            "warning",
            ctx.where(("training", "hyper_parameters", "n_rollouts")) if n_set else ctx.where(("training",)),
            "a reward with n_rollouts = 1: the group-normalised reward advantage is always zero, so the reward "
            "teaches nothing",
            "set n_rollouts >= 2 (8 is the documented start)",
        )


def _lengths(ctx: CheckContext) -> None:
    rep = ctx.report
    t_len, t_set = ctx.hp_value("opd_teacher_max_model_len")
    max_len, l_set = ctx.hp_value("max_length")
    if t_len and max_len and (t_set or l_set) and t_len < max_len:
        rep.add(
            "config.teacher-context-short",
            "warning",
            ctx.where(
                ("training", "hyper_parameters", "opd_teacher_max_model_len" if t_set else "max_length")
            ),
            f"opd_teacher_max_model_len {int(t_len)} < max_length {int(max_len)}: tokens past the teacher's "
            "context get no teacher score and trace/distillation/valid_token_rate drops below 1",
            f"set opd_teacher_max_model_len >= {int(max_len)} (raise opd_teacher_max_num_batched_tokens with it)",
        )
    _teacher_limits(ctx, t_len, t_set)
    p_len, p_set = ctx.hp_value("max_prompt_length")
    if p_len and max_len and (p_set or l_set) and p_len >= max_len:
        rep.add(
            "config.prompt-length-exceeds-max",
            "error",
            ctx.where(("training", "hyper_parameters", "max_prompt_length" if p_set else "max_length")),
            f"max_prompt_length {int(p_len)} >= max_length {int(max_len)}: no room is left for the response",
            "keep max_prompt_length well below max_length",
        )


def _teacher_limits(ctx: CheckContext, t_len: float | None, t_set: bool) -> None:
    """The teacher's vLLM limits against each other and against the docs' preset for its size."""
    rep = ctx.report
    tokens, n_set = ctx.hp_value("opd_teacher_max_num_batched_tokens")
    hp_path = ("training", "hyper_parameters")
    if t_len and tokens and (t_set or n_set) and tokens < t_len:
        rep.add(
            "config.teacher-batched-tokens",
            "warning",
            ctx.where(
                (*hp_path, "opd_teacher_max_num_batched_tokens" if n_set else "opd_teacher_max_model_len")
            ),
            f"opd_teacher_max_num_batched_tokens {int(tokens)} < opd_teacher_max_model_len {int(t_len)}: one "
            "full-length sequence does not fit in one teacher batch (without chunked prefill vLLM refuses to start)",
            f"set opd_teacher_max_num_batched_tokens >= {int(t_len)} (the docs raise both together)",
        )
    teacher = ctx.raw.get("teacher_model")
    if not (isinstance(teacher, str) and size_class(teacher) == "large"):
        return  # the small column is the table's default: only a large teacher has a preset to miss
    for name in (
        "opd_teacher_max_model_len",
        "opd_teacher_max_num_batched_tokens",
        "opd_teacher_gpu_memory_utilization",
    ):
        preset = PARAMS_BY_NAME[name].large
        value, is_set = ctx.hp_value(name)  # one rule for the value the job gets, written out or the default
        risky = value is not None and (value > preset if "memory" in name else value < preset)
        if risky:
            rep.add(
                "config.teacher-preset",
                "warning",
                ctx.where((*hp_path, name) if is_set else hp_path),
                f"{name} {value:g}{'' if is_set else ' (not set: the default)'} is "
                f"{'above' if 'memory' in name else 'below'} the docs' preset {preset:g} for "
                f"a >=30B teacher ({teacher}): "
                + (
                    "too little memory is left for its weights"
                    if "memory" in name
                    else "long sequences lose teacher scores"
                ),
                f"start from {name}: {preset:g} (the table's large column; `opd config --help`)",
            )


def _resources(ctx: CheckContext) -> None:
    rep = ctx.report
    for key, value in ctx.raw_section("resources").items():
        path = ("training", "resources", key)
        spec = PARAMS_BY_NAME.get(key)
        if spec is None or spec.section != "resources":
            if spec is not None:
                rep.add(
                    "config.misplaced-key",
                    "error",
                    ctx.where(path),
                    f"`{key}` is a hyper-parameter, not a resource: the service ignores it here",
                    f"move `{key}` under `training.hyper_parameters`",
                )
                continue
            near = closest(key, "resources")
            rep.add(
                "config.unknown-resource",
                "warning",
                ctx.where(path),
                f"unknown resource key `{key}`: the service ignores it without a word",
                f"did you mean `{near}`?" if near else "remove it",
            )
            continue
        if value is None or path in ctx.explained:
            continue
        _check_value(rep, ctx, "resources", key, value, spec, path, f"allowed: {spec.range_text()}")
        _documented_value(ctx, spec, value, path)


def _documented_value(ctx: CheckContext, spec: Any, value: Any, path: tuple[str, ...]) -> None:
    """A value outside the set the docs document: an error when it is not even of the documented kind
    (`charge_type: free`, `mtu_spec_code: BOGUS`), a warning when it is of the kind but undocumented."""
    if spec.documented is None or not isinstance(value, str) or value in spec.documented:
        return
    shown = ", ".join(map(str, spec.documented))
    of_form = spec.form is not None and re.fullmatch(spec.form, value) is not None
    why = (
        "it has the documented form, but the docs do not list it: the service may refuse it"
        if of_form
        else f"it is not of the documented form ({spec.form}), so the service refuses the job"
    )
    ctx.report.add(
        "config.undocumented-value",
        "warning" if of_form else "error",
        ctx.where(path),
        f"{spec.name} {value!r} is not a documented value (the docs: {shown}): {why}",
        f"write {spec.name}: {spec.documented[0]}"
        + (" (or confirm yours in the Bailian console)" if of_form else ""),
    )


def _functions(ctx: CheckContext) -> None:
    rep = ctx.report
    funcs = ctx.raw_functions()
    seen: dict[str, int] = {}
    for i, f in enumerate(funcs):
        name = f.get("name")
        if isinstance(name, str) and name:
            if name in seen:
                rep.add(
                    "config.duplicate-function-name",
                    "error",
                    ctx.where(("functions", i, "name")),
                    f"function name {name!r} is already used by functions[{seen[name]}]: the SDK refuses to "
                    "submit (error 3004)",
                    "give every function a unique name",
                )
            else:
                seen[name] = i
        _runtime_sanity(ctx, i, f)
    rollouts = [i for i, f in enumerate(funcs) if f.get("type", "rollout") == "rollout"]
    if len(rollouts) > 1:
        rep.add(
            "config.multiple-rollouts",
            "warning",
            ctx.where(("functions", rollouts[1])),
            f"{len(rollouts)} rollout functions: the SDK registers (and uploads) all of them but submits only the "
            "first",
            "keep one rollout function",
        )


def _whole(value: Any) -> float | None:
    num = as_number(value)
    return None if num is None or isinstance(value, str) else num


def _runtime_sanity(ctx: CheckContext, i: int, f: dict[str, Any]) -> None:
    """Values the SDK passes on unchecked but that no function deployment can honour."""
    rep = ctx.report
    runtime = given if isinstance(given := f.get("runtime"), dict) else {}
    lo, hi, cap = (_whole(runtime.get(k)) for k in ("min_capacity", "max_capacity", "capacity"))
    if lo is not None and hi is not None and lo > hi:
        rep.add(
            "config.runtime-capacity",
            "error",
            ctx.where(("functions", i, "runtime", "min_capacity")),
            f"functions[{i}].runtime.min_capacity {lo:g} > max_capacity {hi:g}: no instance count satisfies both",
            f"set min_capacity <= max_capacity (e.g. min_capacity: {hi:g})",
        )
    elif cap is not None and ((lo is not None and cap < lo) or (hi is not None and cap > hi)):
        rep.add(
            "config.runtime-capacity",
            "warning",
            ctx.where(("functions", i, "runtime", "capacity")),
            f"functions[{i}].runtime.capacity {cap:g} is outside [min_capacity, max_capacity]",
            "keep min_capacity <= capacity <= max_capacity",
        )
    for path, value, what in (
        (
            ("runtime", "concurrency"),
            _whole(runtime.get("concurrency")),
            "requests one instance handles at once",
        ),
        (("timeout",), _whole(f.get("timeout")), "seconds a call may take"),
    ):
        if value is not None and value <= 0:
            rep.add(
                "config.runtime-nonpositive",
                "error",
                ctx.where(("functions", i, *path)),
                f"functions[{i}].{'.'.join(path)} is {value:g}: it is the {what}, so every call would fail or wait",
                f"set {path[-1]} to a positive number (the docs: concurrency 20, timeout 120)",
            )
    weight = _whole(f.get("weight"))
    if weight is not None and weight < 0:
        rep.add(
            "config.negative-weight",
            "error",
            ctx.where(("functions", i, "weight")),
            f"functions[{i}].weight is {weight:g}: a negative weight rewards the answers your function scores low",
            "use a positive weight (1.0 for a single reward; weights of several rewards are summed)",
        )


def _datasets(ctx: CheckContext) -> None:
    rep = ctx.report
    datasets = ctx.raw.get("datasets")
    if not isinstance(datasets, list):
        datasets = []
    kinds = [d.get("type", "training") for d in datasets if isinstance(d, dict)]
    if "training" not in kinds:
        rep.add(
            "config.no-training-data",
            "error",
            ctx.where(("datasets",)) if "datasets" in ctx.raw else ctx.config_name,
            "no training dataset: the job has nothing to learn from",
            "add `datasets: [{type: training, data_source_type: file_id, file_name: data/train.jsonl}]`",
        )
    for i, d in enumerate(datasets):
        if not isinstance(d, dict):
            continue
        kind = d.get("type", "training")
        src = d.get("data_source_type", "file_id") or "file_id"
        if kind == "testing":
            rep.add(
                "config.testing-dataset",
                "warning",
                ctx.where(("datasets", i, "type")),
                "datasets of type `testing` are never submitted by the SDK",
                "use `type: validation` to evaluate during training",
            )
        if src == "file_id" and not d.get("file_name") and not d.get("file_id"):
            rep.add(
                "config.dataset-source-missing",
                "error",
                ctx.where(("datasets", i)),
                f"datasets[{i}] has neither file_name nor file_id",
                "add `file_name: data/train.jsonl`",
            )
        elif src == "download_url" and not d.get("download_url"):
            rep.add(
                "config.dataset-source-missing",
                "error",
                ctx.where(("datasets", i)),
                f"datasets[{i}] is download_url but has no download_url",
                "add `download_url: https://...`",
            )
        elif src == "oss_mount" and not d.get("mount_storage"):
            rep.add(
                "config.dataset-source-missing",
                "error",
                ctx.where(("datasets", i)),
                f"datasets[{i}] is oss_mount but has no mount_storage",
                "add `mount_storage: {region: ..., bucket: ..., file_path: ...}`",
            )


def dataset_files(ctx: CheckContext) -> list[tuple[int, str, Path, str]]:
    """(index, type, local path, as written) of each dataset the SDK would upload from disk."""
    out: list[tuple[int, str, Path, str]] = []
    datasets = ctx.raw.get("datasets")
    for i, d in enumerate(datasets if isinstance(datasets, list) else []):
        if not isinstance(d, dict):
            continue
        src = d.get("data_source_type", "file_id") or "file_id"
        name = d.get("file_name")
        if src == "file_id" and isinstance(name, str) and name:
            out.append((i, str(d.get("type", "training")), ctx.resolve(name), name))
    return out


def _check_value(rep, ctx, section: str, key: str, value, spec, path, fix: str) -> None:
    """Type/range check of one hyper-parameter or resource value (numbers YAML read as strings included)."""
    numeric_str = _numeric_string(ctx, section, key, value)
    checked = as_number(value) if numeric_str else value
    if spec.type == "int" and numeric_str and checked is not None and float(checked).is_integer():
        checked = int(checked)
    if spec.local_choices and checked in spec.local_choices:
        if ctx.target != "local":
            rep.add(
                "config.bad-value",
                "error",
                ctx.where(path),
                f"{key}: {checked!r} runs only on the local engine (opd serve); Bailian knows "
                f"{', '.join(map(str, spec.choices or []))}",
                f"use {spec.default!r} for the cloud, or check with --target local",
            )
        return
    problem = spec.problem(checked)
    if problem:
        rep.add("config.bad-value", "error", ctx.where(path), f"{key}: {problem}", fix)
