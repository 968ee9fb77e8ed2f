"""Preflight checks: every known mistake in config, data, functions and environment, before compute is spent.

`check(workspace, target)` runs all rule families and returns a :class:`CheckReport` of findings
(`rule`, `severity`, `where`, `message`, `fix`). Rule ids are stable; `RULES` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opd_nb.checks.context import CheckContext
from opd_nb.checks.report import CheckReport, Finding
from opd_nb.errors import OpdError
from opd_nb.spec.job import NOT_UTF8, parse_config_text, read_config_text, workspace_config

__all__ = ["check", "check_config_text", "CheckReport", "Finding", "RULES"]

TARGETS = ("cloud", "local")

# Stable rule ids -> one line on what each catches (docs and `opd check --help` read this).
RULES: dict[str, str] = {
    "config.missing": "no config.yaml in the workspace",
    "config.yaml-syntax": "the YAML does not parse",
    "config.empty": "the config is empty (SDK 1001)",
    "config.schema": "a key or value the SDK's TuningModel refuses (SDK 1002)",
    "config.functions-null": "`functions: null` (the docs suggest it, the SDK rejects it)",
    "config.job-name": "empty, blank or over-long job name",
    "config.model-missing": "no student model (silently omitted by the SDK)",
    "config.teacher-missing": "training.type pg_opd without teacher_model (SDK 3006)",
    "config.no-teacher": "no teacher: the job would be plain RL",
    "config.teacher-not-bailian": "a teacher_model of another vendor (gpt-4o, claude-...) Bailian cannot serve",
    "config.teacher-unknown": "a teacher_model that is no model id Bailian documents (refused on both planes)",
    "config.training-type-by-hand": "training.type set by hand against the teacher (a teacher makes it pg_opd)",
    "config.no-learning-signal": "no teacher and no reward function: nothing to learn from",
    "config.functions-empty-list": "`functions: []` where the docs ask pure distillation for None",
    "config.teacher-smaller": "a teacher smaller than the student",
    "config.continued-training": "model is an earlier job's output: same base, a rate below the parent's",
    "config.model-placeholder": "a model id left as a placeholder (your-teacher-model-id, <teacher>)",
    "config.teacher-undocumented": "a teacher Bailian does not document for OPD (cloud)",
    "config.teacher-family": "a teacher of another model family than the student (tokenizers differ)",
    "config.undocumented-value": "a resource value outside the documented set (charge_type, mtu_spec_code)",
    "config.save-steps-unscored": "save_steps not a multiple of eval_steps: checkpoints without a score",
    "config.save-total-limit": "save_total_limit outside the docs' 3-5",
    "config.model-id-not-cloud": "a Hugging Face repo or path as model id for the cloud",
    "config.model-not-servable": "the local control plane cannot serve a model id",
    "config.unknown-hyperparameter": "a hyper-parameter OPD does not know (silently ignored)",
    "config.unknown-resource": "a resource key OPD does not know (silently ignored)",
    "config.misplaced-key": "a resource under hyper_parameters or vice versa",
    "config.numeric-string": "a number YAML reads as a string (e.g. 1e-6)",
    "config.bad-value": "a value outside the allowed type, range or choices",
    "config.learning-rate-high": "learning_rate far above the 1e-6 start",
    "config.mini-batch-too-large": "ppo_mini_batch_size > batch_size x n_rollouts",
    "config.reward-single-rollout": "a reward with n_rollouts = 1 (zero advantage)",
    "config.teacher-context-short": "opd_teacher_max_model_len < max_length",
    "config.teacher-batched-tokens": "opd_teacher_max_num_batched_tokens < opd_teacher_max_model_len",
    "config.teacher-preset": "teacher limits below the docs' preset for a >=30B teacher",
    "config.prompt-length-exceeds-max": "max_prompt_length >= max_length",
    "config.kl-loss-coef": "kl_loss_coef set (not consumed by OPD)",
    "config.eval-steps-too-sparse": "eval_steps x 3 beyond the total number of steps",
    "config.duplicate-function-name": "two functions with the same name (SDK 3004)",
    "config.multiple-rollouts": "more than one rollout (only the first is submitted)",
    "config.runtime-capacity": "min_capacity > max_capacity, or capacity outside them",
    "config.runtime-nonpositive": "a function's concurrency or timeout of 0 or less",
    "config.negative-weight": "a function with a negative weight",
    "config.unregistered-code": "reward/rollout code in functions/ the config does not register",
    "config.no-training-data": "no training dataset",
    "config.testing-dataset": "a `testing` dataset (never submitted)",
    "config.dataset-source-missing": "a dataset without file_name/file_id/url (or an OSS mount without its parts)",
    # what PyYAML (the SDK's loader) accepts but the author did not mean (checks/yaml_structure.py)
    "config.yaml-encoding": "the config is not UTF-8 text (the SDK reads UTF-8)",
    "config.yaml-tab": "a tab in the YAML (spaces only)",
    "config.yaml-multiple-documents": "more than one YAML document in the file (`---`)",
    "config.yaml-duplicate-key": "a key written twice in one mapping (the last one wins silently)",
    "config.yaml-implicit-type": "a value or key YAML 1.1 reads as a boolean, number or date where text is meant",
    "config.yaml-number-form": "a number YAML 1.1 reads as another (010 octal, 1:30 base 60, 0o17 text)",
    "config.yaml-null-value": "an empty value (null): a dropped hyper-parameter or a block left empty",
    "config.yaml-block-shape": "a list written where a mapping belongs, or the reverse (`- ` added or missing)",
    "config.yaml-invisible-character": "a no-break/zero-width space or a stray space in quotes in a key or a text",
    "config.yaml-merge-conflict": "a `<<: [*a, *b]` merge whose anchors bring one key twice (the first wins)",
    # cross-field constraints against the job's size (checks/schedule.py)
    "config.save-steps-beyond-total": "save_steps beyond the total number of steps (no checkpoint to choose)",
    "config.warmup-beyond-total": "lr_warmup_steps not below the total steps (the rate never peaks)",
    "config.save-field-unused": "save_steps / save_total_limit that save_strategy makes meaningless",
    "config.warmup-unused": "a warm-up with a schedule that has none (constant), or the reverse",
    "config.mini-batch-divides": "batch_size x n_rollouts not a multiple of ppo_mini_batch_size",
    "config.algorithm-unused": "algorithm set in a job without a reward (pure distillation ignores it)",
    # identifiers with a documented form (checks/identifiers.py)
    "config.id-wrong-kind": "a job, checkpoint, file or function id where another kind belongs",
    "config.dataset-source-fields": "dataset fields of another data_source_type (ignored)",
    "config.finetuned-teacher": "a fine-tuned output as teacher_model (Bailian deploys only its own)",
    "config.job-name-suffix": "a job name that already ends with the -<8 hex> the SDK appends",
    "data.file-missing": "a dataset file that does not exist",
    "data.empty-file": "an empty dataset file (silently skipped)",
    "data.file-too-large": "a dataset over the 1 GiB upload limit",
    "data.bad-json": "an unparsable JSONL line",
    "data.blank-line": "a blank line inside a JSONL file",
    "data.not-object": "a JSONL line that is not an object",
    "data.missing-messages": "a row without a messages list",
    "data.empty-messages": "a row with an empty messages list",
    "data.bad-message": "a message that is not an object",
    "data.unknown-role": "a role other than system/user/assistant/tool",
    "data.role-order": "an impossible role order",
    "data.no-user-turn": "a row without a user message",
    "data.empty-content": "a message with empty content",
    "data.missing-solution": "rows without rollout_extra.solution while a reward is registered",
    "data.no-validation": "validation set missing or empty",
    "data.overlap": "prompts in both training and validation",
    "data.duplicate-prompt": "a prompt repeated within one file",
    "data.prompt-too-long": "prompts over max_prompt_length",
    "data.too-few-rows": "training rows not more than batch_size (the platform refuses the file)",
    "functions.bad-classpath": "a classpath the SDK cannot parse (4041-4043)",
    "functions.classpath-missing": "the classpath's file does not exist",
    "functions.class-missing": "the class is not in that file",
    "functions.missing-init": "a package folder without __init__.py",
    "functions.wrong-base": "the class is not the matching SDK processor",
    "functions.no-process": "the class has no process method",
    "functions.syntax-error": "the function's file does not parse",
    "functions.process-signature": "process does not take exactly one input",
    "functions.no-observe-processor": "process without @observe_processor (no tracing)",
    "functions.bad-return": "process returns something other than the SDK's output model",
    "functions.reward-score-in-metrics": "reward_score left inside reward_metrics",
    "functions.metric-not-float": "a reward metric written as text (the SDK's Reward refuses it)",
    "functions.unknown-task-status": "a TaskStatus member that does not exist (e.g. FAIL)",
    "functions.requirements-missing": "no requirements.txt where the SDK looks",
    "functions.runtime-sdk": "the function runtime gets no SDK, or one that may lack the server's extra",
    "functions.unresolved-import": "an import nothing the function runtime installs provides",
    "functions.bad-requirement": "a requirements.txt line pip cannot read",
    "functions.process-not-async": "process is a plain def (the docs' contract is async def)",
    "functions.zipdir-missing": "fcmodel.zipdir is not a directory",
    "functions.excluded-import": "code imported from a folder the zip leaves out",
    "functions.zip-too-large": "a function zip over 200 MiB",
    "functions.zip-contents": "a function zip that would upload notebooks, data or large files",
    "functions.secret-in-zip": "a .env file or key-like string in the uploaded zip",
    "env.dashscope-missing": "dashscope not installed",
    "env.dashscope-too-old": "dashscope older than 2.0.2",
    "env.no-api-key": "no API key for the cloud",
    "env.dotenv-malformed": "a .env line python-dotenv cannot read, or a name with no `=` (submit_job.py refuses it)",
    "env.fc-pypi-lib": "FC_PYPI_LIB absolute, missing, or left out of the function zip",
    "env.fc-layer-used": "FC_LAYER_USED neither true nor false",
    "env.cloud-target-local-url": "cloud target while DASHSCOPE_HTTP_BASE_URL is local",
    "env.base-url-changed": "DASHSCOPE_HTTP_BASE_URL changed after dashscope was imported",
    "env.local-server-unreachable": "no local control plane answers",
    "workspace.missing": "the workspace folder does not exist (or is a file)",
}


def _run(
    ws: Path,
    text: str,
    config_name: str,
    target: str,
    base_url: str | None,
    tokenizer_path: str | None,
    sets: Mapping[str, Any] | None = None,
    run_args: Mapping[str, str | None] | None = None,
) -> CheckReport:
    from opd_nb.checks.advice import check_advice
    from opd_nb.checks.config import check_config, check_config_with_data
    from opd_nb.checks.data import check_data
    from opd_nb.checks.environment import check_environment
    from opd_nb.checks.function_code import check_functions
    from opd_nb.checks.function_runtime import check_runtime
    from opd_nb.checks.identifiers import check_identifiers
    from opd_nb.checks.schedule import check_schedule
    from opd_nb.checks.yaml_structure import check_yaml_structure

    report = CheckReport(workspace=str(ws), target=target)
    ctx = CheckContext(
        workspace=ws,
        target=target,
        report=report,
        parsed=parse_config_text(
            text, config_name, sets={**(sets or {}), **_run_sets(run_args)}, labels=RUN_FLAGS
        ),
        config_name=config_name,
        base_url=base_url,
        tokenizer_path=tokenizer_path,
        text=text,
    )
    check_yaml_structure(ctx)  # first: what the loader made of the file, before any field is read
    check_config(ctx)
    if ctx.raw:
        check_identifiers(ctx)
        check_data(ctx)
        check_config_with_data(ctx)
        check_advice(ctx)
        check_schedule(ctx)
        check_functions(ctx)
        check_runtime(ctx)
    check_environment(ctx)
    return report.sort()


# The `run()` arguments a submit passes besides the YAML, as config keys, and the flag each comes from.
RUN_KEYS = {"model": "model.name", "teacher_model": "teacher_model", "job_name": "name"}
RUN_FLAGS = {"model.name": "--model", "teacher_model": "--teacher-model", "name": "--job-name"}


def _run_sets(run_args: Mapping[str, str | None] | None) -> dict[str, str]:
    """`run()` arguments as config changes (only truthy ones count, as in the SDK's `run()`)."""
    unknown = set(run_args or {}) - set(RUN_KEYS)
    if unknown:
        raise OpdError(
            f"unknown run() argument(s): {', '.join(sorted(unknown))}", fix=f"use {', '.join(RUN_KEYS)}"
        )
    return {RUN_KEYS[k]: v for k, v in (run_args or {}).items() if v}


def _target(target: str) -> str:
    if target not in TARGETS:
        raise OpdError(f"unknown target {target!r}", where="--target", fix="use cloud or local")
    return target


def check(
    workspace: str | Path = ".",
    target: str = "cloud",
    *,
    base_url: str | None = None,
    tokenizer_path: str | None = None,
    config: str = "config.yaml",
    sets: Mapping[str, Any] | None = None,
    run_args: Mapping[str, str | None] | None = None,
) -> CheckReport:
    """Run every rule over the workspace's config, data, functions and environment.

    `workspace` is the folder or its config file (`ws/config.yaml`). `sets` are `--set` changes
    (:func:`opd_nb.spec.sets.parse_sets`) and `run_args` the `run()` arguments a submit passes (model,
    teacher_model, job_name): the rules see the config as that submit would send it.
    """
    from opd_nb.spec.sets import normalize_sets

    target = _target(target)
    ws, config = workspace_config(workspace, config)
    sets = normalize_sets(sets)
    if not ws.is_dir():
        is_file = ws.is_file()
        report = CheckReport(workspace=str(ws), target=target)
        report.add(
            "workspace.missing",
            "error",
            str(ws),
            f"{ws} is a file, not a workspace folder" if is_file else f"workspace folder {ws} does not exist",
            f"pass the folder that holds config.yaml (e.g. {ws.parent}), or the config.yaml itself"
            if is_file
            else "create one with `opd new` or pass the right folder",
        )
        return report
    path = ws / config
    if not path.is_file():
        report = CheckReport(workspace=str(ws), target=target)
        report.add(
            "config.missing",
            "error",
            str(path),
            f"no {config} in {ws}",
            "create the workspace with `opd new`, or pass the workspace folder",
        )
        from opd_nb.checks.environment import check_environment

        check_environment(
            CheckContext(
                workspace=ws,
                target=target,
                report=report,
                parsed=parse_config_text("{}", config),
                config_name=config,
            )
        )
        return report.sort()
    try:
        text = read_config_text(path)
    except OpdError as exc:
        report = CheckReport(workspace=str(ws), target=target)
        rule = "config.yaml-encoding" if exc.code == NOT_UTF8 else "config.yaml-syntax"
        report.add(rule, "error", exc.where or str(path), exc.message, exc.fix or "")
        return report
    return _run(ws, text, config, target, base_url, tokenizer_path, sets, run_args)


def check_config_text(
    yaml_text: str,
    workspace: str | Path = ".",
    target: str = "cloud",
    config_name: str = "config.yaml",
    *,
    base_url: str | None = None,
) -> CheckReport:
    """Check a YAML body before it is written (for `%%opd config`): same rules, data read from the workspace."""
    return _run(Path(workspace), yaml_text, config_name, _target(target), base_url, None)
