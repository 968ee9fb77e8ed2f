"""The function runtime: what runs the user's code in the cloud must be able to import it.

The SDK zips ``zipdir`` and Function Compute runs it with ``python3 -m`` the SDK's server, after
installing ``FC_PYPI_LIB`` (the SDK: seed 001 calls it required for reward and agentic jobs) and
``requirements.txt`` (``start.sh``, written by the SDK's ``generate_agentic_script``). So every import
of the function code must resolve to the standard library, a module in the zip, a requirement (or what
it installs), or the SDK and its dependencies; nothing is imported here to find out (``ast`` only).

Requirement names are not import names (``PyYAML`` -> ``yaml``): the installed packages' metadata
(``importlib.metadata.packages_distributions``) maps them where the package is installed here, and
:data:`IMPORT_NAMES` where it is not. ``dashscope`` 2.1 moved the function server's dependencies into
an ``agentic-rl`` extra (../shared/reference/bailian-lifecycle-2026.md), so a requirement that may
install 2.1+ without it is a warning.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from opd_nb.checks.context import CheckContext
from opd_nb.checks.function_code import BASES, exclude_patterns, excluded_by, split_classpath

SDK = "dashscope"
SDK_EXTRA = "agentic-rl"  # dashscope >= 2.1: fastapi, uvicorn, opentelemetry-sdk (the function server's)
SERVER_DEPS = ("fastapi", "uvicorn", "opentelemetry-sdk")
_SPLIT_VERSIONS = ("2.1.0", "2.1.3", "2.2.0", "3.0.0")  # a specifier admitting any of these may get 2.1+
# Distributions whose import names differ from their names, for packages not installed here (where one is
# installed, its own metadata answers). Keys are canonical names (PEP 503).
IMPORT_NAMES: dict[str, tuple[str, ...]] = {
    "pyyaml": ("yaml",),
    "scikit-learn": ("sklearn",),
    "scikit-image": ("skimage",),
    "beautifulsoup4": ("bs4",),
    "pillow": ("PIL",),
    "opencv-python": ("cv2",),
    "opencv-python-headless": ("cv2",),
    "opencv-contrib-python": ("cv2",),
    "python-dateutil": ("dateutil",),
    "python-dotenv": ("dotenv",),
    "python-docx": ("docx",),
    "python-levenshtein": ("Levenshtein",),
    "protobuf": ("google",),
    "attrs": ("attr", "attrs"),
    "pyzmq": ("zmq",),
    "pycryptodome": ("Crypto",),
    "pyjwt": ("jwt",),
    "pymupdf": ("fitz",),
    "mysqlclient": ("MySQLdb",),
    "psycopg2-binary": ("psycopg2",),
    "faiss-cpu": ("faiss",),
    "websocket-client": ("websocket",),
    "setuptools": ("setuptools", "pkg_resources"),
}
_TRY_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


# ---------------------------------------------------------------- what the runtime installs


@dataclass
class Installs:
    """What one zipdir's runtime gets: requirement lines, the SDK's sources, unparsable lines."""

    requirements: list[tuple[int, Requirement]] = field(default_factory=list)  # (line, requirement)
    sdk: list[tuple[str, Requirement, str | None]] = field(
        default_factory=list
    )  # (where, req, wheel version)
    bad: list[tuple[int, str]] = field(default_factory=list)


def _requirement(text: str) -> Requirement | None:
    """One requirement line or FC_PYPI_LIB item (a name, a spec, a wheel file, `x.whl[extra]`)."""
    text = text.strip()
    wheel, _, extras = text.partition("[")
    if wheel.endswith(".whl"):
        try:
            name, version, _, _ = parse_wheel_filename(Path(wheel).name)
        except InvalidWheelFilename:
            return None
        return Requirement(f"{name}[{extras.rstrip(']')}]=={version}" if extras else f"{name}=={version}")
    if "#egg=" in text:
        text = text.split("#egg=", 1)[1]
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def _lines(path: Path, seen: set[Path]) -> Iterable[tuple[int, str]]:
    """(line number, requirement text) of a requirements file, following `-r other.txt` inside it."""
    if path in seen or not path.is_file():
        return
    seen.add(path)
    for number, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ", "-c ", "--constraint ")):
            if line.startswith(("-r", "--requirement")):
                yield from _lines(path.parent / line.split(None, 1)[1].strip(), seen)
            continue
        if line.startswith(("-e ", "--editable ")):
            line = line.split(None, 1)[1]
        elif line.startswith("-"):  # --index-url, --extra-index-url, --find-links, ...: no package
            continue
        yield number, line


def installs(ctx: CheckContext, req_file: Path) -> Installs:
    """What the runtime of a zipdir installs, read from FC_PYPI_LIB and its requirements file."""
    out = Installs()
    for number, line in _lines(req_file, set()):
        req = _requirement(line)
        if req is None:
            out.bad.append((number, line))
            continue
        out.requirements.append((number, req))
        if canonicalize_name(req.name) == SDK:
            out.sdk.append((f"{ctx.rel(req_file)}:{number}", req, None))
    for item in ctx.setting("FC_PYPI_LIB").split():  # start.sh installs each word: SDK_PACKAGE
        req = _requirement(item)
        if req is not None and canonicalize_name(req.name) == SDK:
            out.sdk.append(("FC_PYPI_LIB", req, item))
    return out


@lru_cache(maxsize=1)
def _installed_imports() -> dict[str, frozenset[str]]:
    """Canonical distribution name -> the import names it provides, for what is installed here."""
    out: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            out.setdefault(canonicalize_name(dist), set()).add(module)
    return {k: frozenset(v) for k, v in out.items()}


def import_names(dist: str) -> frozenset[str]:
    """The top-level import names a distribution provides (metadata where installed, else the table and
    its own name with `-`/`.` as `_`)."""
    name = canonicalize_name(dist)
    known = _installed_imports().get(name)
    if known:
        return known
    return frozenset(
        {*IMPORT_NAMES.get(name, ()), name.replace("-", "_"), dist.replace("-", "_").replace(".", "_")}
    )


def _dependencies(dist: str, extras: frozenset[str]) -> list[Requirement] | None:
    """A distribution's requirements with `extras` (None: it is not installed here, so they are unknown)."""
    try:
        raw = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return None
    out = []
    for text in raw:
        req = Requirement(text)
        wanted = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (*extras, ""))
        if wanted:
            out.append(req)
    return out


def provided(roots: Iterable[Requirement]) -> tuple[set[str], set[str]]:
    """(import names the runtime gets from `roots` and everything they pull in, the names of roots whose
    dependencies are unknown here because they are not installed)."""
    names: set[str] = set()
    unknown: set[str] = set()
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        req = todo.pop()
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        seen.add(key)
        names |= import_names(req.name)
        deps = _dependencies(req.name, frozenset(req.extras))
        if deps is None:
            unknown.add(req.name)
        else:
            todo.extend(deps)
    return names, unknown


def import_to_requirement(module: str) -> str:
    """The distribution to add for an import name (PyPI's name where it differs: yaml -> PyYAML)."""
    installed = metadata.packages_distributions().get(module)
    if installed:
        return installed[0]
    for dist, modules in IMPORT_NAMES.items():
        if module in modules:
            return dist
    return module.replace("_", "-")


# ---------------------------------------------------------------- what the code imports


def _guarded(node: ast.Try) -> bool:
    """A try whose handlers catch a failed import (the code runs without the module)."""
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if caught is None or any(
            (isinstance(n, ast.Name) and n.id in _TRY_IMPORT_ERRORS)
            or (isinstance(n, ast.Attribute) and n.attr in _TRY_IMPORT_ERRORS)
            for n in names
        ):
            return True
    return False


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def code_imports(tree: ast.AST) -> list[tuple[int, str, int, list[str]]]:
    """(line, module, level, imported names) of every import the code needs at run time (not those
    guarded by `try: ... except ImportError`, nor under `if TYPE_CHECKING:`)."""
    out: list[tuple[int, str, int, list[str]]] = []
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Try) and _guarded(node):
            stack.extend(n for part in (node.orelse, node.finalbody) for n in part)
            continue
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, 0, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            out.append((node.lineno, node.module or "", node.level, [a.name for a in node.names]))
        stack.extend(ast.iter_child_nodes(node))
    return sorted(out)


def _local_file(base: Path, dotted: str) -> Path | None:
    """The file a dotted module name resolves to under `base` (module file or package `__init__`)."""
    if not dotted:
        init = base / "__init__.py"
        return init if init.is_file() else None
    target = base.joinpath(*dotted.split("."))
    for cand in (target.with_suffix(".py"), target / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _is_local(zipdir: Path, top: str) -> bool:
    return (zipdir / f"{top}.py").is_file() or (zipdir / top).is_dir()


@dataclass
class Unresolved:
    file: Path
    line: int
    module: str
    top: str


def unresolved_imports(zipdir: Path, entry: Path, have: set[str]) -> list[Unresolved]:
    """Imports reachable from `entry` (following the zip's own modules) that resolve to nothing in `have`,
    the standard library or the zip."""
    patterns = exclude_patterns()
    out: list[Unresolved] = []
    todo, seen = [entry], set()
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue  # reported by the syntax rule
        for line, module, level, names in code_imports(tree):
            if level:
                base = file.parent
                for _ in range(level - 1):
                    base = base.parent
                todo += _follow(base, module, names)
                continue
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in have:
                continue
            if _is_local(zipdir, top):
                rel = (zipdir / top).relative_to(zipdir).as_posix()
                if not excluded_by(rel, patterns):  # an excluded folder is functions.excluded-import's
                    todo += _follow(zipdir, module, names)
                continue
            out.append(Unresolved(file, line, module, top))
    return out


def _follow(base: Path, module: str, names: list[str]) -> list[Path]:
    """The zip's files an import loads: the module, and any submodule imported from it by name."""
    files = [f for f in [_local_file(base, module)] if f is not None]
    prefix = f"{module}." if module else ""
    files += [f for n in names if (f := _local_file(base, prefix + n)) is not None]
    return files


# ---------------------------------------------------------------- the rules


def _entries(ctx: CheckContext) -> dict[Path, list[Path]]:
    """zipdir -> the class files of the functions that are zipped from it (reused entities are not)."""
    out: dict[Path, list[Path]] = {}
    for f in ctx.raw_functions():
        fc = given if isinstance(given := f.get("fcmodel"), dict) else {}
        if f.get("entity_id") or str(f.get("type", "rollout")) not in BASES:
            continue
        zipdir = ctx.resolve(str(fc.get("zipdir") or "./"))
        parsed = (
            split_classpath(str(fc["classpath"]))
            if fc.get("classpath")
            else (str(fc["filepath"]), str(fc.get("classname")))
            if fc.get("filepath")
            else None
        )
        if not zipdir.is_dir() or not isinstance(parsed, tuple):
            continue  # reported by the function rules
        file = zipdir / parsed[0]
        out.setdefault(zipdir.resolve(), [])
        if file.is_file():
            out[zipdir.resolve()].append(file.resolve())
    return out


def check_runtime(ctx: CheckContext) -> None:
    """The SDK the runtime installs, and every import of the function code against what it installs."""
    for zipdir, entries in _entries(ctx).items():
        req_file = zipdir / "requirements.txt"
        got = installs(ctx, req_file)
        for number, text in got.bad:
            ctx.report.add(
                "functions.bad-requirement",
                "error",
                f"{ctx.rel(req_file)}:{number}",
                f"pip cannot read {text!r}: installing requirements.txt fails, so the function never starts",
                "write one requirement per line (name[extras]>=version), e.g. PyYAML>=6.0",
            )
        _sdk(ctx, req_file, got)
        have, unknown = provided([r for _, r in got.requirements] + [r for _, r, _ in got.sdk])
        have.add(SDK)  # a missing SDK is _sdk's one finding, not one per `from dashscope ... import`
        for entry in entries:
            for miss in unresolved_imports(zipdir, entry, have):
                _unresolved(ctx, req_file, miss, unknown)


def _severe(ctx: CheckContext) -> Literal["error", "warning"]:
    """An error for the cloud; locally the functions run in this Python environment, so only a later cloud
    job would fail: a warning."""
    return "error" if ctx.target == "cloud" else "warning"


_LOCAL_NOTE = " (locally the function runs in this environment; the cloud's runtime is what fails)"


def _sdk(ctx: CheckContext, req_file: Path, got: Installs) -> None:
    rel = ctx.rel(req_file)
    if not got.sdk:
        ctx.report.add(
            "functions.runtime-sdk",
            _severe(ctx),
            rel,
            f"the function runtime gets no dashscope SDK: FC_PYPI_LIB is not set and {rel} does not list "
            "dashscope, so the SDK's function server cannot start there (seed 001: FC_PYPI_LIB is required for "
            "reward and agentic jobs)" + ("" if ctx.target == "cloud" else _LOCAL_NOTE),
            f"add `{SDK}[{SDK_EXTRA}]>=2.0.2` to {rel}, or set FC_PYPI_LIB=./<the SDK wheel in zipdir>",
        )
        return
    listed = {canonicalize_name(r.name) for _, r in got.requirements}
    if all(canonicalize_name(d) in listed for d in SERVER_DEPS):
        return  # the server's dependencies are installed by name, whatever the SDK's version
    for where, req, wheel in got.sdk:
        if SDK_EXTRA in req.extras or not any(req.specifier.contains(v) for v in _SPLIT_VERSIONS):
            continue
        what = f"FC_PYPI_LIB={wheel}" if wheel else f"`{req}`"
        ctx.report.add(
            "functions.runtime-sdk",
            "warning",
            where,
            f"{what} may install dashscope 2.1 or later, which moved the function server's dependencies "
            f"({', '.join(SERVER_DEPS)}) into the `{SDK_EXTRA}` extra: without it the server cannot start",
            f"ask for the extra: `{SDK}[{SDK_EXTRA}]{req.specifier}` (2.0.2 has no such extra; pip only warns)"
            if not wheel
            else f"FC_PYPI_LIB={wheel}[{SDK_EXTRA}]",
        )


def _unresolved(ctx: CheckContext, req_file: Path, miss: Unresolved, unknown: set[str]) -> None:
    dist = import_to_requirement(miss.top)
    rel = ctx.rel(req_file)
    maybe = (
        f"; unless {', '.join(sorted(unknown))} (not installed here, so unread) brings it" if unknown else ""
    )
    ctx.report.add(
        "functions.unresolved-import",
        "warning" if unknown else _severe(ctx),
        f"{ctx.rel(miss.file)}:{miss.line}",
        f"`{miss.module}` is imported, but nothing the function runtime installs provides `{miss.top}`: it is "
        f"not the standard library, a module in the zip, in {rel} (or what that installs) or the SDK, so the "
        f"job fails with ModuleNotFoundError{maybe}" + ("" if ctx.target == "cloud" else _LOCAL_NOTE),
        f"add `{dist}` to {rel}" + (f" (its import name is {miss.top})" if dist != miss.top else ""),
    )
