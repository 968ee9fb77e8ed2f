"""Function rules: what the SDK's zip-and-register step would upload, read statically (no user code runs).

The classes are found with `ast`, so checking never imports the user's code (no side effects, no
dashscope import, fast). The zip is computed with the SDK's own exclusion semantics
(`FC_ZIP_EXCLUDE_PATTERNS`, matched against base names and relative paths with fnmatch).
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from opd_nb.checks.context import CheckContext
from opd_nb.checks.processor_contract import check_process
from opd_nb.constants import ENTITY_STATE_DIR, WORKSPACE_ZIP_EXCLUDES

DEFAULT_EXCLUDES = WORKSPACE_ZIP_EXCLUDES
ZIP_LIMIT_BYTES = 200 * 1024**2  # FC_OSS_FILE_SIZE_WARNING, a hard limit in the SDK
SECRET_SCAN_MAX_BYTES = 2 * 1024**2
BASES = {
    "reward": "AbstractRewardProcessor",
    "group_reward": "AbstractGroupRewardProcessor",
    "rollout": "AbstractRolloutProcessor",
}
_KEY_PATTERNS = [
    (re.compile(r"\bsk-[A-Za-z0-9]{20,}\b"), "a DashScope API key (sk-...)"),
    (re.compile(r"\bLTAI[A-Za-z0-9]{12,}\b"), "an Alibaba Cloud AccessKey id"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (
        re.compile(
            r"(?i)\b(?:DASHSCOPE_API_KEY|FC_API_KEY|api_key|secret|token)\s*[=:]\s*['\"]?([A-Za-z0-9_\-]{16,})"
        ),
        "an assigned key or token",
    ),
]
_PLACEHOLDER = re.compile(r"(?i)your|xxx|example|changeme|placeholder|dummy|<|\.\.\.|^(.)\1+$")


def exclude_patterns() -> list[str]:
    """What submit_job.py has the SDK leave out of a function zip: the user's FC_ZIP_EXCLUDE_PATTERNS as
    written, else the workspace's list (the SDK's defaults plus notebooks and the job's own files);
    the remembered-entities dir is always out."""
    raw = os.environ.get("FC_ZIP_EXCLUDE_PATTERNS")
    patterns = [p.strip() for p in (DEFAULT_EXCLUDES if raw is None else raw).split(",") if p.strip()]
    return patterns if ENTITY_STATE_DIR in patterns else [*patterns, ENTITY_STATE_DIR]


def excluded_by(rel: str, patterns: list[str]) -> str | None:
    """The pattern that removes `rel` (a path relative to zipdir) from the SDK's zip, or None."""
    parts = rel.replace("\\", "/").split("/")
    for i in range(len(parts)):
        sub = "/".join(parts[: i + 1])
        for pat in patterns:
            if fnmatch.fnmatch(parts[i], pat) or fnmatch.fnmatch(sub, pat):
                return pat
    return None


def zip_members(zipdir: Path, patterns: list[str] | None = None) -> list[Path]:
    """The files the SDK's `zip_dir` would put in the function zip (same walk, same exclusions)."""
    patterns = exclude_patterns() if patterns is None else patterns
    out: list[Path] = []
    for root, dirs, files in os.walk(zipdir, topdown=True):
        rel_root = os.path.relpath(root, start=zipdir)
        keep = []
        for d in dirs:
            rel = os.path.join(rel_root, d).replace("\\", "/")
            if not any(
                fnmatch.fnmatch(os.path.basename(rel), p) or fnmatch.fnmatch(rel, p) for p in patterns
            ):
                keep.append(d)
        dirs[:] = keep
        for f in files:
            if not any(fnmatch.fnmatch(f, p) for p in patterns):
                out.append(Path(root) / f)
    return out


def split_classpath(classpath: str) -> tuple[str, str] | str:
    """(filepath, classname) the way the SDK parses it, or an error message (SDK errors 4041-4043)."""
    full = classpath.strip()
    if ":" in full:
        left, _, right = full.partition(":")
        if not left.strip() or not right.strip():
            return f"classpath {classpath!r} must look like path/to/file.py:ClassName (SDK error 4041)"
        if ":" in right:
            return f"class name {right!r} cannot contain ':' (SDK error 4042)"
        filepath = left.strip()
        if not filepath.endswith(".py"):
            filepath += ".py"
        return filepath.replace("\\", "/"), right.strip()
    parts = full.split(".")
    if len(parts) < 2:
        return (
            f"classpath {classpath!r} must be module.path.ClassName or path/to/file.py:ClassName "
            "(SDK error 4043)"
        )
    return "/".join(parts[:-1]) + ".py", parts[-1]


# ---------------------------------------------------------------- static class analysis


@dataclass
class ClassInfo:
    ok: bool | None  # True: right base; False: wrong/none; None: could not tell
    base_found: str | None
    has_process: bool
    detail: str = ""


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return None


def _imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """local name -> (module, original name) for `from m import X [as Y]`."""
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            mod = "." * node.level + node.module
            for alias in node.names:
                out[alias.asname or alias.name] = (mod, alias.name)
    return out


def _base_name(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _module_file(module: str, zipdir: Path, from_file: Path) -> Path | None:
    level = len(module) - len(module.lstrip("."))
    name = module.lstrip(".")
    base = from_file.parent
    if level:
        for _ in range(level - 1):
            base = base.parent
    else:
        base = zipdir
    rel = Path(*name.split(".")) if name else Path()
    for cand in (base / rel.with_suffix(".py") if name else None, base / rel / "__init__.py"):
        if cand is not None and cand.is_file():
            return cand
    return None


def _has_process(cls: ast.ClassDef) -> bool:
    """A `process` method, or the SDK's `@reward_func` class decorator (which writes one)."""
    if any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "process" for n in cls.body):
        return True
    return any(
        _base_name(dec.func if isinstance(dec, ast.Call) else dec) == "reward_func"
        for dec in cls.decorator_list
    )


def _follow_base(
    path: Path, tree: ast.Module, name: str, imports: dict, zipdir: Path, kind: str, depth: int
) -> ClassInfo | None:
    """Analyse a base defined in the same file or in a module inside the zip; None: not found there."""
    if any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body) and name not in imports:
        return analyse_class(path, name, zipdir, kind, depth + 1)
    if name in imports:
        mod_file = _module_file(imports[name][0], zipdir, path)
        return analyse_class(mod_file, imports[name][1], zipdir, kind, depth + 1) if mod_file else None
    return None


def analyse_class(path: Path, classname: str, zipdir: Path, kind: str, _depth: int = 0) -> ClassInfo | None:
    """Does `classname` in `path` subclass the processor for `kind` and have `process`? None: class not found."""
    tree = _parse(path)
    if tree is None:
        return ClassInfo(ok=None, base_found=None, has_process=False, detail=f"{path.name} does not parse")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == classname), None)
    if cls is None:
        return None
    has_process = _has_process(cls)
    imports = _imports(tree)
    unknown = None
    wrong = None
    for b in cls.bases:
        name = _base_name(b)
        if name is None or (isinstance(b, ast.Name) and name == "object" and name not in imports):
            continue  # `object` is no SDK processor: the class counts as having no base
        original = imports.get(name, ("", name))[1] if isinstance(b, ast.Name) else name
        if original in BASES.values() or original == "AbstractProcessor":
            if original == BASES[kind]:
                return ClassInfo(ok=True, base_found=original, has_process=has_process)
            wrong = original
            continue
        sub = None if _depth > 8 else _follow_base(path, tree, name, imports, zipdir, kind, _depth)
        if sub is not None and sub.ok:
            return ClassInfo(ok=True, base_found=sub.base_found, has_process=has_process or sub.has_process)
        if sub is not None and sub.base_found:
            wrong = sub.base_found
        elif (sub is None and _depth <= 8) or (sub is not None and sub.ok is None):
            unknown = name
    if wrong:
        return ClassInfo(ok=False, base_found=wrong, has_process=has_process)
    if unknown:
        return ClassInfo(
            ok=None, base_found=None, has_process=has_process, detail=f"base `{unknown}` is outside the zip"
        )
    return ClassInfo(ok=False, base_found=None, has_process=has_process)


def processor_classes(root: Path) -> list[tuple[Path, str, str, int]]:
    """(file, class, kind, line) of every processor class directly subclassing an SDK processor under `root`."""
    kinds = {v: k for k, v in BASES.items()}
    out: list[tuple[Path, str, str, int]] = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        tree = _parse(path)
        if tree is None:
            continue
        imports = _imports(tree)
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for b in node.bases:
                name = _base_name(b)
                original = imports.get(name, ("", name))[1] if isinstance(b, ast.Name) and name else name
                if original in kinds:
                    out.append((path, node.name, kinds[original], node.lineno))
    return out


# ---------------------------------------------------------------- the rules


def check_functions(ctx: CheckContext) -> None:
    rep = ctx.report
    funcs = ctx.raw_functions()
    _unregistered_code(ctx, funcs)
    zipdirs: dict[Path, int] = {}
    for i, f in enumerate(funcs):
        if f.get("entity_id"):
            continue  # already registered: nothing is zipped or uploaded
        kind = str(f.get("type", "rollout"))
        if kind not in BASES:
            continue
        fc = given if isinstance(given := f.get("fcmodel"), dict) else {}
        zipdir = ctx.resolve(str(fc.get("zipdir") or "./"))
        if not zipdir.is_dir():
            rep.add(
                "functions.zipdir-missing",
                "error",
                ctx.where(("functions", i, "fcmodel", "zipdir")),
                f"zipdir {fc.get('zipdir')!r} is not a directory",
                "point zipdir at the workspace root ('./')",
            )
            continue
        zipdirs.setdefault(zipdir.resolve(), i)
        _class(ctx, i, kind, fc, zipdir)
        _requirements(ctx, i, fc, zipdir)
    for zipdir, i in zipdirs.items():
        _zip(ctx, i, zipdir)


def _class(ctx: CheckContext, i: int, kind: str, fc: dict, zipdir: Path) -> None:
    """Where the class is (classpath, file, packages), then what it is (base class, `process`)."""
    located = _locate_class(ctx, i, fc, zipdir)
    if located is not None:
        _class_shape(ctx, kind, zipdir, *located)


def _locate_class(ctx: CheckContext, i: int, fc: dict, zipdir: Path) -> tuple[str, str, str] | None:
    """(where, filepath, classname) of a function's class, or None after reporting why not."""
    rep = ctx.report
    classpath = fc.get("classpath") or ""
    where = ctx.where(("functions", i, "fcmodel", "classpath" if classpath else "filepath"))
    if classpath:
        parsed = split_classpath(str(classpath))
    elif fc.get("filepath") and fc.get("classname"):
        parsed = (str(fc["filepath"]), str(fc["classname"]))
    else:
        rep.add(
            "functions.bad-classpath",
            "error",
            ctx.where(("functions", i)),
            f"functions[{i}] has no fcmodel.classpath",
            "add `fcmodel: {classpath: functions.reward.reward.MyRewardProcessor}`",
        )
        return
    if isinstance(parsed, str):
        rep.add(
            "functions.bad-classpath",
            "error",
            where,
            parsed,
            "write functions.reward.reward.MyRewardProcessor or functions/reward/reward.py:MyRewardProcessor",
        )
        return
    filepath, classname = parsed
    if Path(filepath).is_absolute():
        rep.add(
            "functions.bad-classpath",
            "error",
            where,
            "an absolute classpath gives the function server a broken module path",
            "make it relative to zipdir",
        )
        return
    file = zipdir / filepath
    if not file.is_file():
        rep.add(
            "functions.classpath-missing",
            "error",
            where,
            f"{ctx.rel(file)} does not exist (classpath {classpath or filepath!r})",
            "fix the classpath, or create the file (module dots map to folders: a.b.C -> a/b.py)",
        )
        return
    pat = excluded_by(filepath, exclude_patterns())
    if pat:
        rep.add(
            "functions.excluded-import",
            "error",
            where,
            f"{filepath} is left out of the uploaded zip (pattern {pat!r} of FC_ZIP_EXCLUDE_PATTERNS)",
            "move the code out of folders named data/test/tests/tmp/temp/build",
        )
    # Every folder between zipdir and the file must be a package (the FAQ's ModuleNotFoundError).
    rel_parent = Path(filepath).parent
    d = zipdir
    for part in rel_parent.parts:
        d = d / part
        if not (d / "__init__.py").is_file():
            rep.add(
                "functions.missing-init",
                "error",
                ctx.rel(d),
                f"package folder {ctx.rel(d)}/ has no __init__.py: the function server cannot import "
                f"{classname} (ModuleNotFoundError)",
                f"create an empty {ctx.rel(d / '__init__.py')}",
            )
    return where, filepath, classname


def _parse_reporting(ctx: CheckContext, file: Path) -> ast.Module | None:
    """The function's module, or None after a finding with the line that does not parse."""
    shown = ctx.rel(file)
    try:
        return ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except SyntaxError as exc:
        ctx.report.add(
            "functions.syntax-error",
            "error",
            f"{shown}:{exc.lineno or 1}",
            f"{shown} does not parse: {exc.msg} (line {exc.lineno}, column {exc.offset}); the function server "
            "cannot import it",
            f"fix the syntax on that line (`python -m py_compile {shown}` shows it too)",
        )
    except (UnicodeDecodeError, OSError) as exc:
        ctx.report.add(
            "functions.syntax-error", "error", shown, f"{shown} cannot be read: {exc}", "save it as UTF-8"
        )
    return None


def _class_shape(
    ctx: CheckContext, kind: str, zipdir: Path, where: str, filepath: str, classname: str
) -> None:
    rep = ctx.report
    file = zipdir / filepath
    shown = ctx.rel(file)
    tree = _parse_reporting(ctx, file)
    if tree is None:
        return
    info = analyse_class(file, classname, zipdir, kind)
    if info is None:
        rep.add(
            "functions.class-missing",
            "error",
            where,
            f"class {classname} is not defined in {shown}",
            "fix the class name in the classpath (it is case-sensitive)",
        )
        return
    if info.ok is False:
        got = f"it derives from {info.base_found}" if info.base_found else "it derives from no SDK processor"
        rep.add(
            "functions.wrong-base",
            "error",
            where,
            f"{classname} is registered as a {kind} function but {got}; the function server requires a "
            f"{BASES[kind]}",
            f"class {classname}({BASES[kind]}) (from dashscope.finetune.reinforcement)",
        )
    elif info.ok is None:
        rep.add(
            "functions.wrong-base",
            "info",
            where,
            f"could not verify the base class of {classname} ({info.detail})",
            f"make sure it derives from {BASES[kind]}",
        )
    if not info.has_process and info.ok is not False:
        rep.add(
            "functions.no-process",
            "error",
            where,
            f"{classname} defines no `process` method: the abstract method makes instantiation fail",
            f"add `async def process(self, input: ...)` returning the {kind} output",
        )
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == classname), None)
    if cls is not None:
        check_process(ctx, file, tree, cls, kind)


def _requirements(ctx: CheckContext, i: int, fc: dict, zipdir: Path) -> None:
    rep = ctx.report
    req = zipdir / "requirements.txt"
    if not req.is_file():
        rep.add(
            "functions.requirements-missing",
            "error",
            ctx.rel(req),
            f"{ctx.rel(req)} is missing: the SDK builds the dependency layer from zipdir/requirements.txt and "
            "registration fails (error 2052)",
            "create requirements.txt in zipdir (it may be empty or list your reward's dependencies)",
        )
    custom = fc.get("requirements_path")
    if (
        isinstance(custom, str)
        and custom.strip()
        and Path(custom).as_posix().lstrip("./") != "requirements.txt"
    ):
        path = zipdir / custom
        if not path.is_file():
            rep.add(
                "functions.requirements-missing",
                "error",
                ctx.where(("functions", i, "fcmodel", "requirements_path")),
                f"requirements_path {custom!r} does not exist under zipdir",
                "fix the path or remove the key",
            )


def _unregistered_code(ctx: CheckContext, funcs: list[dict]) -> None:
    root = ctx.workspace / "functions"
    if not root.is_dir():
        return
    registered = {str(f.get("type", "rollout")) for f in funcs}
    reward_kinds = {"reward", "group_reward"}
    for path, cls, kind, line in processor_classes(root):
        missing = kind not in registered and not (kind in reward_kinds and registered & reward_kinds)
        if missing:
            what = "pure distillation" if not registered else "without it"
            ctx.report.add(
                "config.unregistered-code",
                "warning",
                f"{ctx.rel(path)}:{line}",
                f"{kind} class {cls} is in functions/ but config.yaml registers no {kind} function: the job would "
                f"silently run {what}",
                f"register it under `functions:` (type: {kind}, fcmodel.classpath: "
                f"{ctx.rel(path)[:-3].replace('/', '.')}.{cls}) or delete the file",
            )


def _zip(ctx: CheckContext, i: int, zipdir: Path) -> None:
    rep = ctx.report
    patterns = exclude_patterns()
    members = zip_members(zipdir, patterns)
    _excluded_imports(ctx, zipdir, members, patterns)
    _secrets(ctx, zipdir, members)
    _unexpected_uploads(ctx, zipdir, members)
    total = sum(p.stat().st_size for p in members if p.is_file())
    if total > ZIP_LIMIT_BYTES:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "fn.zip"
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
                for p in members:
                    zf.write(p, p.relative_to(zipdir))
            size = out.stat().st_size
        if size > ZIP_LIMIT_BYTES:
            biggest = sorted(members, key=lambda p: p.stat().st_size, reverse=True)[:3]
            rep.add(
                "functions.zip-too-large",
                "error",
                ctx.rel(zipdir) or ".",
                f"the function zip would be {size / 1024**2:.0f} MiB, over the SDK's 200 MiB limit (largest: "
                + ", ".join(ctx.rel(p) for p in biggest)
                + ")",
                "move large files into data/ (excluded) or out of zipdir, or add FC_ZIP_EXCLUDE_PATTERNS",
            )


NOTEBOOK_SUFFIX = ".ipynb"
DATA_SUFFIXES = (".jsonl", ".csv", ".parquet", ".arrow", ".tsv", ".npy", ".pt", ".safetensors", ".bin")
LARGE_UPLOAD_BYTES = 1024**2


def _unexpected_uploads(ctx: CheckContext, zipdir: Path, members: list[Path]) -> None:
    """Say what a submit would upload with the function when that holds notebooks (every save changes the
    code and re-registers the function), data or anything large: the user sees it before paying for it."""
    odd = [
        p for p in members if p.suffix in (NOTEBOOK_SUFFIX, *DATA_SUFFIXES) or _size(p) >= LARGE_UPLOAD_BYTES
    ]
    if not odd:
        return
    odd.sort(key=_size, reverse=True)
    total = sum(_size(p) for p in members)
    shown = ", ".join(f"{ctx.rel(p)} ({_size(p) / 1024:,.0f} KiB)" for p in odd[:8])
    more = f" and {len(odd) - 8} more" if len(odd) > 8 else ""
    notebooks = any(p.suffix == NOTEBOOK_SUFFIX for p in odd)
    ctx.report.add(
        "functions.zip-contents",
        "warning" if notebooks else "info",
        ctx.rel(zipdir) or ".",
        f"a submit uploads {len(members)} files ({total / 1024:,.0f} KiB) with the functions, including "
        f"{shown}{more}"
        + ("; a notebook changes with every save, and the function is registered again" if notebooks else ""),
        "leave them out with FC_ZIP_EXCLUDE_PATTERNS (its default in a generated workspace already leaves "
        "out notebooks, data/ and tests/), or move them out of zipdir",
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _is_pytest_file(path: Path) -> bool:
    """pytest's own files (a workspace's root `test_reward.py`, the docs' name): the runtime never imports them."""
    return (
        path.name == "conftest.py"
        or fnmatch.fnmatch(path.name, "test_*.py")
        or path.name.endswith("_test.py")
    )


def _excluded_imports(ctx: CheckContext, zipdir: Path, members: list[Path], patterns: list[str]) -> None:
    for path in members:
        if path.suffix != ".py" or _is_pytest_file(path):
            continue
        tree = _parse(path)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [(a.name, 0) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [(node.module, node.level)]
            else:
                continue
            for mod, level in mods:
                base = zipdir if level == 0 else path.parent
                for _ in range(max(0, level - 1)):
                    base = base.parent
                parts = mod.split(".")
                cur = base
                for part in parts:
                    cur = cur / part
                    if not (cur.is_dir() or cur.with_suffix(".py").is_file()):
                        break
                    target = cur if cur.is_dir() else cur.with_suffix(".py")
                    try:
                        rel = target.relative_to(zipdir).as_posix()
                    except ValueError:
                        break
                    pat = excluded_by(rel, patterns)
                    if pat:
                        ctx.report.add(
                            "functions.excluded-import",
                            "error",
                            f"{ctx.rel(path)}:{node.lineno}",
                            f"imports `{mod}` from {rel}, which the SDK's zip leaves out (pattern {pat!r}): "
                            "ModuleNotFoundError at run time",
                            f"rename the folder (e.g. {rel.split('/')[0]}_utils) or move the code into functions/",
                        )
                        break


def _secrets(ctx: CheckContext, zipdir: Path, members: list[Path]) -> None:
    rep = ctx.report
    live = [
        v for v in (os.environ.get("DASHSCOPE_API_KEY"), os.environ.get("FC_API_KEY")) if v and len(v) >= 8
    ]
    for path in members:
        name = path.name
        rel = ctx.rel(path)
        if name.startswith(".env") and name not in (".env.example", ".env.sample", ".env.template"):
            rep.add(
                "functions.secret-in-zip",
                "error",
                rel,
                f"{rel} would be uploaded in the function zip (only a file named exactly .env is excluded)",
                "move it out of zipdir or rename it to .env",
            )
            continue
        try:
            if path.stat().st_size > SECRET_SCAN_MAX_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        hit = None
        for value in live:
            if value in text:
                hit = (text.index(value), "your API key")
                break
        if hit is None:
            for pattern, what in _KEY_PATTERNS:
                for m in pattern.finditer(text):
                    secret = m.group(m.lastindex or 0)
                    if _PLACEHOLDER.search(secret):
                        continue
                    hit = (m.start(), what)
                    break
                if hit:
                    break
        if hit:
            line = text.count("\n", 0, hit[0]) + 1
            rep.add(
                "functions.secret-in-zip",
                "error",
                f"{rel}:{line}",
                f"{hit[1]} in {rel} would be uploaded with the function code (the whole zipdir is zipped)",
                "read secrets from the environment (os.environ) and keep them in .env, which is excluded",
            )
