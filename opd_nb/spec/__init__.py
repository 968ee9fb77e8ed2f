"""The job spec: pydantic models of the SDK's YAML, the hyper-parameter table and the SDK's precedence.

Kept import-light (pydantic and PyYAML only): the CLI, the notebook form and the checks all read it.
"""

from __future__ import annotations

from opd_nb.spec.functions import function_classpath, reward_classpath_of
from opd_nb.spec.hyperparams import PARAMS, PARAMS_BY_NAME, ParamSpec
from opd_nb.spec.job import JobConfig, load_config, parse_config_text
from opd_nb.spec.yaml_edit import apply_values, edit_section, yaml_scalar

__all__ = [
    "PARAMS",
    "PARAMS_BY_NAME",
    "ParamSpec",
    "JobConfig",
    "load_config",
    "parse_config_text",
    "function_classpath",
    "reward_classpath_of",
    "apply_values",
    "edit_section",
    "yaml_scalar",
]
