"""What every rule family reads: the workspace, the parsed config (even when invalid) and the target."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opd_nb.checks.report import CheckReport
from opd_nb.constants import DEFAULT_CLOUD_API, DEFAULT_LOCAL_API, LOCAL_API_KEY
from opd_nb.spec.hyperparams import PARAMS_BY_NAME
from opd_nb.spec.job import JobConfig, KeyPath, ParsedConfig


def as_number(value: Any) -> float | None:
    """A YAML value as a number: ints/floats as-is, numeric strings parsed (they are flagged elsewhere)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


@dataclass
class CheckContext:
    workspace: Path
    target: str
    report: CheckReport
    parsed: ParsedConfig
    config_name: str = "config.yaml"
    base_url: str | None = None
    tokenizer_path: str | None = None
    train_rows: int | None = None  # filled by the data rules
    local_models: dict[str, Any] = field(default_factory=dict)
    text: str = ""  # the config as written (the YAML rules read its structure, before any field)
    explained: set[KeyPath] = field(default_factory=set)  # paths a YAML rule explained (no schema repeat)

    # ------------------------------------------------------------ raw views (work on invalid configs too)

    @property
    def config(self) -> JobConfig | None:
        return self.parsed.config

    @property
    def raw(self) -> dict[str, Any]:
        return self.parsed.data if isinstance(self.parsed.data, dict) else {}

    def raw_section(self, name: str) -> dict[str, Any]:
        training = self.raw.get("training")
        block = training.get(name) if isinstance(training, dict) else None
        return block if isinstance(block, dict) else {}

    @property
    def hp(self) -> dict[str, Any]:
        return self.raw_section("hyper_parameters")

    def hp_value(self, name: str) -> tuple[float | None, bool]:
        """(numeric value, explicitly set) of a hyper-parameter, falling back to the table default."""
        hp = self.hp
        if name in hp and hp[name] is not None:
            return as_number(hp[name]), True
        return as_number(PARAMS_BY_NAME[name].default), False

    def raw_functions(self) -> list[dict[str, Any]]:
        funcs = self.raw.get("functions")
        return [f for f in funcs if isinstance(f, dict)] if isinstance(funcs, list) else []

    def function_kinds(self) -> set[str]:
        return {str(f.get("type", "rollout")) for f in self.raw_functions()}

    @property
    def has_reward(self) -> bool:
        return bool(self.function_kinds() & {"reward", "group_reward"})

    def where(self, path: KeyPath) -> str:
        return self.parsed.lines.where(path)

    def rel(self, path: Path) -> str:
        """A path as the user sees it: relative to the workspace when inside it."""
        try:
            return str(path.resolve().relative_to(self.workspace.resolve()))
        except ValueError:
            return str(path)

    def api_base(self) -> str:
        """The control plane the target reads from: --base-url, else DASHSCOPE_HTTP_BASE_URL, else its default."""
        import os

        env = os.environ.get("DASHSCOPE_HTTP_BASE_URL") or None
        default = DEFAULT_LOCAL_API if self.target == "local" else DEFAULT_CLOUD_API
        return (self.base_url or env or default).rstrip("/")

    def api_key(self) -> str:
        """The key a read of the control plane sends: the environment's, else (for the cloud) the workspace
        .env's; a local plane without a server key takes any."""
        import os

        key = os.environ.get("DASHSCOPE_API_KEY")
        if not key and self.target == "cloud" and (self.workspace / ".env").is_file():
            from dotenv import dotenv_values

            key = dotenv_values(self.workspace / ".env").get("DASHSCOPE_API_KEY")
        return key or LOCAL_API_KEY

    def setting(self, name: str) -> str:
        """A variable as submit_job.py sees it: the environment's, else the workspace .env's ('' when unset)."""
        import os

        if name in os.environ:
            return os.environ[name].strip()
        if (self.workspace / ".env").is_file():
            from dotenv import dotenv_values

            return (dotenv_values(self.workspace / ".env").get(name) or "").strip()
        return ""

    def resolve(self, path_text: str) -> Path:
        """Relative paths in the config resolve against the workspace (submit runs the SDK there)."""
        p = Path(path_text).expanduser()
        return p if p.is_absolute() else self.workspace / p
