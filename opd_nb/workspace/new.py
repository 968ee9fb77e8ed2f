"""Create OPD workspaces from the bundled cookiecutter template (`opd new`, `%opd new`).

Why a wrapper around cookiecutter: answers are validated up front (one clear line instead of a
hook traceback), the bake happens in a temporary directory next to DEST and is moved into place
only when it succeeded (nothing half-written), and cookiecutter's user config and replay files are
kept out of the user's home directory.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field

from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.workspace import mode_files
from opd_nb.workspace import rules as workspace_rules

MODES = workspace_rules.MODES
Mode = Literal["pure-distill", "reward", "agentic"]
DEFAULT_STUDENT = "qwen3.5-9b"
DEFAULT_TEACHER = "qwen3.5-397b-a17b"
DEFAULT_REWARD_CLASS = "RewardProcessor"
DEFAULT_ROLLOUT_CLASS = "RolloutProcessor"
# `opd new` names its answers by their flags.
_FLAG_LABELS = {
    "workspace_name": "the workspace name",
    "student_model": "--student",
    "teacher_model": "--teacher",
    "reward_class": "--reward-class",
    "rollout_class": "rollout class",
}


class Workspace(ResultMixin, BaseModel):
    """A generated workspace: where it is, its mode and the files it holds (relative, sorted)."""

    model_config = ConfigDict(frozen=True)

    path: Path
    mode: Mode
    name: str
    slug: str
    student: str
    teacher: str
    with_reward: bool
    files: list[str] = Field(default_factory=list)

    @property
    def has_rollout(self) -> bool:
        return self.mode == "agentic"

    def next_steps(self) -> list[str]:
        """What a new user runs next, in order."""
        return [
            f"cd {_shell_quote(str(self.path))}",
            "pytest",
            "python submit_job.py --dry-run",
            "python submit_job.py --local --wait    # with `opd serve` running",
        ]

    def __str__(self) -> str:
        extras = [x for x, on in (("reward", self.with_reward), ("rollout", self.has_rollout)) if on]
        lines = [
            f"created {self.mode} workspace {self.name!r} at {self.path} ({len(self.files)} files"
            + (f"; functions: {', '.join(extras)})" if extras else ")"),
            f"  student {self.student}, teacher {self.teacher}",
            "next:",
            *(f"  {step}" for step in self.next_steps()),
        ]
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.text import Text

        head, _, rest = str(self).partition("\n")
        return Text.assemble((head, "bold green"), "\n", rest)

    def _repr_html_(self) -> str:
        files = "".join(f"<li><code>{html.escape(f)}</code></li>" for f in self.files)
        steps = "<br>".join(html.escape(step) for step in self.next_steps())
        return (
            f"<div><b>{html.escape(self.mode)}</b> workspace <b>{html.escape(self.name)}</b> at "
            f"<code>{html.escape(str(self.path))}</code><br>student <code>{html.escape(self.student)}</code>, "
            f"teacher <code>{html.escape(self.teacher)}</code>"
            f"<details><summary>{len(self.files)} files</summary><ul>{files}</ul></details>"
            f"<pre>{steps}</pre></div>"
        )


def template_dir() -> Path:
    """The cookiecutter template: inside the installed wheel, else the source checkout's `template/`."""
    package_dir = Path(__file__).resolve().parent.parent  # opd_nb/ (this module is opd_nb/workspace/new.py)
    for candidate in (package_dir / "template", package_dir.parent / "template"):
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    raise OpdError(
        "the workspace template is missing from this installation",
        where=str(package_dir),
        fix="reinstall opd-nb (pip install --force-reinstall opd-nb)",
        exit_code=1,
    )


def slugify(name: str) -> str:
    """The job/directory slug cookiecutter derives from a name (the same `slugify` filter)."""
    from slugify import slugify as _slugify  # python-slugify, a cookiecutter dependency

    return _slugify(name)


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def validate(
    mode: str,
    *,
    name: str,
    student: str,
    teacher: str,
    reward_class: str,
    rollout_class: str = DEFAULT_ROLLOUT_CLASS,
) -> str:
    """Check the answers (the rules in `opd_nb.workspace.rules`, shared with the template's hook); returns the slug."""
    answers = {
        "mode": mode,
        "workspace_name": name,
        "student_model": student,
        "teacher_model": teacher,
        "reward_class": reward_class,
        "rollout_class": rollout_class,
    }
    found = workspace_rules.problems(answers, slugify=slugify, labels=_FLAG_LABELS)
    if found:
        raise OpdError(found[0].message, fix=found[0].fix)
    return slugify(name)


def _is_mode(mode: str) -> TypeGuard[Mode]:
    return mode in MODES


def create(
    mode: str,
    dest: str | Path,
    *,
    name: str | None = None,
    student: str | None = None,
    teacher: str | None = None,
    with_reward: bool | None = None,
    reward_class: str | None = None,
) -> Workspace:
    """Generate a workspace for `mode` at `dest` (which must not exist or be empty).

    `name` defaults to the directory name; `with_reward` only matters for agentic (default True):
    reward mode always has a reward, pure-distill never. User mistakes raise OpdError (exit 2) and
    leave nothing behind.
    """
    dest_path = Path(dest).expanduser()
    if str(dest).strip() == "":
        raise OpdError("no destination directory given", fix="e.g. opd new reward my-ws")
    dest_path = dest_path.resolve()
    if not _is_mode(mode):  # before touching the file system
        raise OpdError(f"unknown mode {mode!r}", fix=f"choose one of {', '.join(MODES)}")
    if mode == "pure-distill" and with_reward:
        raise OpdError("pure-distill workspaces have no reward function", fix="use mode reward (or agentic)")
    if mode == "reward" and with_reward is False:
        raise OpdError("a reward workspace always has a reward function", fix="use mode pure-distill")
    has_reward = mode_files.has_reward(mode, with_reward is not False)  # agentic: a reward unless refused
    name = dest_path.name if name is None else name
    student = DEFAULT_STUDENT if student is None else student
    teacher = DEFAULT_TEACHER if teacher is None else teacher
    reward_class = DEFAULT_REWARD_CLASS if reward_class is None else reward_class
    slug = validate(mode, name=name, student=student, teacher=teacher, reward_class=reward_class)

    if dest_path.exists() and (not dest_path.is_dir() or any(dest_path.iterdir())):
        kind = "directory is not empty" if dest_path.is_dir() else "path exists and is not a directory"
        raise OpdError(f"{kind}", where=str(dest_path), fix="choose a new directory name")
    parent = dest_path.parent
    if not parent.is_dir():
        raise OpdError(
            "the parent directory does not exist",
            where=str(parent),
            fix=f"mkdir -p {_shell_quote(str(parent))}",
        )

    context = {
        "workspace_name": name,
        "workspace_slug": slug,
        "mode": mode,
        "with_reward": has_reward,
        "student_model": student,
        "teacher_model": teacher,
        "reward_class": reward_class,
        "rollout_class": DEFAULT_ROLLOUT_CLASS,
    }
    try:
        staging = Path(tempfile.mkdtemp(prefix=".opd-new-", dir=parent))
    except OSError as exc:
        raise OpdError(
            f"cannot write here: {exc.strerror}", where=str(parent), fix="choose a writable directory"
        ) from None
    try:
        baked = _bake(context, staging)
        if dest_path.exists():
            dest_path.rmdir()  # empty (checked above); os.replace needs it gone
        os.replace(baked, dest_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    files = sorted(p.relative_to(dest_path).as_posix() for p in dest_path.rglob("*") if p.is_file())
    return Workspace(
        path=dest_path,
        mode=mode,
        name=name,
        slug=slug,
        student=student,
        teacher=teacher,
        with_reward=has_reward,
        files=files,
    )


def _bake(context: dict[str, Any], staging: Path) -> Path:
    """Run cookiecutter into `staging` with a private config (no user defaults, no replay in ~)."""
    from cookiecutter.exceptions import CookiecutterException
    from cookiecutter.main import cookiecutter

    config = staging / "cookiecutter-config.yaml"
    config.write_text(
        f"cookiecutters_dir: {(staging / 'cookiecutters').as_posix()!r}\n"
        f"replay_dir: {(staging / 'replay').as_posix()!r}\n",
        encoding="utf-8",
    )
    out = staging / "out"
    out.mkdir()
    try:  # the hooks' rules run here, in this process: validate() before, mode_files.prune() after
        project = cookiecutter(
            str(template_dir()),
            no_input=True,
            extra_context=context,
            output_dir=str(out),
            config_file=str(config),
            accept_hooks=False,
        )
    except CookiecutterException as exc:  # the template is broken
        raise OpdError(f"the workspace template failed: {exc}", exit_code=1) from None
    mode_files.prune(Path(project), context["mode"], context["with_reward"])
    return Path(project)
