"""Data rules: the datasets the job would upload, scanned once each (see `opd_nb.data.scan_jsonl`)."""

from __future__ import annotations

from pathlib import Path

from opd_nb.checks.config import dataset_files
from opd_nb.checks.context import CheckContext
from opd_nb.checks.report import CheckReport, Severity
from opd_nb.spec.dataset import (
    RULE_FIX,
    RULE_TEXT,
    UPLOAD_LIMIT_BYTES,
    ScanResult,
    prompt_token_counts,
    read_jsonl,
    scan_jsonl,
)
from opd_nb.spec.submit_rules import TOO_FEW_SAMPLES, too_few_samples, too_few_samples_fix

_SEVERITY: dict[str, Severity] = {"data.blank-line": "warning"}


def _scan_findings(rep: CheckReport, res: ScanResult, shown: str) -> None:
    for rule, issue in res.issues.items():
        sev = _SEVERITY.get(rule, "error")
        text = RULE_TEXT.get(rule, "blank line")
        rep.add(
            rule,
            sev,
            f"{shown}:{issue.lines[0]}",
            f"{text}: {issue.detail + '; ' if issue.detail else ''}{issue.count} row(s), lines {issue.lines_text()}",
            RULE_FIX.get(rule, "remove blank lines"),
        )


def _file_level(rep: CheckReport, path: Path, shown: str, where_cfg: str) -> ScanResult | None:
    if not path.is_file():
        rep.add(
            "data.file-missing",
            "error",
            where_cfg,
            f"dataset file not found: {shown}",
            "fix file_name (relative to the workspace) or create the file",
        )
        return None
    size = path.stat().st_size
    if size > UPLOAD_LIMIT_BYTES:
        rep.add(
            "data.file-too-large",
            "error",
            shown,
            f"{size / 1024**3:.2f} GiB is over the 1 GiB upload limit (the SDK fails with error 4035)",
            "split the file, sample it, or upload it to OSS and use data_source_type: oss_mount",
        )
    if size == 0:
        rep.add(
            "data.empty-file",
            "error",
            shown,
            "the file is empty: the SDK skips it with only a log line",
            "write rows into it (see opd_nb.data.to_rows / write_jsonl)",
        )
        return None
    res = scan_jsonl(path)
    _scan_findings(rep, res, shown)
    if res.n_rows == 0 and not res.issues:
        rep.add("data.empty-file", "error", shown, "the file has no rows", "write rows into it")
    return res


def _prompt_lengths(
    rep: CheckReport, res: ScanResult, path: Path, shown: str, max_prompt: float, tokenizer_path: str | None
) -> None:
    exact = tokenizer_path is not None
    if exact:
        rows = read_jsonl(path)
        # Only rows that passed validation count; their line numbers are in res.row_lines.
        by_line = {ln: r for ln, r in zip(_nonblank_lines(path), rows, strict=False)}
        valid = [by_line[ln] for ln in res.row_lines if ln in by_line]
        tokens = prompt_token_counts(valid, tokenizer_path)
        lines = [ln for ln in res.row_lines if ln in by_line]
    else:
        tokens, lines = res.prompt_tokens, res.row_lines
    over = [(ln, t) for ln, t in zip(lines, tokens, strict=False) if t > max_prompt]
    if over:
        first = ", ".join(str(ln) for ln, _ in over[:5]) + (", ..." if len(over) > 5 else "")
        longest = max(t for _, t in over)
        kind = "exactly" if exact else "about (chars/3.5; pass --tokenizer for exact counts)"
        rep.add(
            "data.prompt-too-long",
            "warning",
            f"{shown}:{over[0][0]}",
            f"{len(over)} prompt(s) over max_prompt_length {int(max_prompt)}; the longest is {kind} "
            f"{longest} tokens (lines {first}); they get cut or dropped",
            "shorten those prompts, drop them, or raise max_prompt_length (and max_length)",
        )


def _nonblank_lines(path: Path) -> list[int]:
    out = []
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            if raw.strip():
                out.append(i)
    return out


def check_data(ctx: CheckContext) -> None:
    """Scan every local dataset of the config; set `ctx.train_rows` for the config rules."""
    rep = ctx.report
    files = dataset_files(ctx)
    datasets = given if isinstance(given := ctx.raw.get("datasets"), list) else []
    kinds = [d.get("type", "training") for d in datasets if isinstance(d, dict)]
    if ctx.raw and "validation" not in kinds:
        rep.add(
            "data.no-validation",
            "warning",
            ctx.where(("datasets",)) if "datasets" in ctx.raw else ctx.config_name,
            "no validation set: validation metrics (validation/data/reward/mean@1) will not be reported",
            "add `{type: validation, data_source_type: file_id, file_name: data/validation.jsonl}` "
            "(opd_nb.data.split makes one)",
        )
    max_prompt, _ = ctx.hp_value("max_prompt_length")
    scans: dict[str, list[tuple[str, ScanResult]]] = {"training": [], "validation": []}
    train_rows = 0
    any_train = False
    for i, kind, path, written in files:
        shown = ctx.rel(path)
        res = _file_level(rep, path, shown, ctx.where(("datasets", i, "file_name")))
        if res is None:
            if kind == "validation":
                rep.add(
                    "data.no-validation",
                    "warning",
                    ctx.where(("datasets", i, "file_name")),
                    f"the validation set {written} is missing or empty",
                    "write validation rows into it",
                )
            continue
        if kind in scans:
            scans[kind].append((shown, res))
        if kind == "training":
            any_train = True
            train_rows += res.n_rows
        elif kind == "validation" and res.n_rows == 0:
            rep.add(
                "data.no-validation",
                "warning",
                shown,
                "the validation set has no valid rows",
                "write validation rows into it",
            )
        if ctx.has_reward and kind in ("training", "validation") and res.missing_solution.count:
            ms = res.missing_solution
            rep.add(
                "data.missing-solution",
                "warning",
                f"{shown}:{ms.lines[0]}",
                f"{ms.count} of {res.n_rows} row(s) have no rollout_extra.solution but a reward is registered "
                f"(lines {ms.lines_text()}); its ground truth will be empty and it may score 0",
                'add "rollout_extra": {"solution": "..."} to each row',
            )
        if res.duplicates.count:
            d = res.duplicates
            rep.add(
                "data.duplicate-prompt",
                "info",
                f"{shown}:{d.lines[0]}",
                f"{d.count} row(s) repeat an earlier prompt ({d.detail}; lines {d.lines_text()})",
                "deduplicate unless the repetition is intended",
            )
        if max_prompt and res.n_rows:
            _prompt_lengths(rep, res, path, shown, max_prompt, ctx.tokenizer_path)
    if any_train:
        ctx.train_rows = train_rows
        batch, b_set = ctx.hp_value("batch_size")
        problem = too_few_samples(train_rows, int(batch)) if batch else None
        if batch and problem is not None:
            rep.add(
                TOO_FEW_SAMPLES.rule,
                "error",
                ctx.where(("training", "hyper_parameters", "batch_size"))
                if b_set
                else scans["training"][0][0]
                if scans["training"]
                else ctx.config_name,
                problem + ("" if b_set else f" (batch_size {int(batch)} is the default)"),
                too_few_samples_fix(train_rows, int(batch)),
            )
    _overlap(rep, scans)


def _overlap(rep: CheckReport, scans: dict[str, list[tuple[str, ScanResult]]]) -> None:
    train_keys: dict[int, tuple[str, int]] = {}
    for shown, res in scans["training"]:
        for key, line in res.keys.items():
            train_keys.setdefault(key, (shown, line))
    for shown, res in scans["validation"]:
        both = [(line, train_keys[key]) for key, line in res.keys.items() if key in train_keys]
        if both:
            both.sort()
            examples = ", ".join(f"{shown}:{vl} = {tf}:{tl}" for vl, (tf, tl) in both[:3])
            rep.add(
                "data.overlap",
                "warning",
                f"{shown}:{both[0][0]}",
                f"{len(both)} validation prompt(s) also appear in the training set ({examples}); validation "
                "scores will look better than they are",
                "remove them from one side (opd_nb.data.split never puts a prompt on both sides)",
            )


def check_data_file(
    path: str | Path,
    *,
    require_solution: bool = False,
    max_prompt_length: int | None = None,
    min_rows: int | None = None,
) -> CheckReport:
    """The data rules for a single JSONL file (no config needed)."""
    rep = CheckReport(workspace=str(Path(path).parent), target="data")
    p = Path(path)
    res = _file_level(rep, p, str(p), str(p))
    if res is None:
        return rep
    if require_solution and res.missing_solution.count:
        ms = res.missing_solution
        rep.add(
            "data.missing-solution",
            "warning",
            f"{p}:{ms.lines[0]}",
            f"{ms.count} of {res.n_rows} row(s) have no rollout_extra.solution (lines {ms.lines_text()})",
            'add "rollout_extra": {"solution": "..."} to each row',
        )
    if max_prompt_length:
        _prompt_lengths(rep, res, p, str(p), max_prompt_length, None)
    if min_rows is not None and res.n_rows < min_rows:
        rep.add(
            "data.too-few-rows", "error", str(p), f"{res.n_rows} row(s), fewer than {min_rows}", "add rows"
        )
    return rep
