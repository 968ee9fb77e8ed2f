"""opd_nb.spec.yaml_edit: changing `training.<section>` keys by lines keeps every comment and the layout."""

from __future__ import annotations

import pytest
import yaml

from opd_nb.errors import OpdError
from opd_nb.spec.yaml_edit import apply_values, edit_section, yaml_scalar

CONFIG = """\
# OPD job configuration
name: demo   # the job name
model:
  name: qwen3.5-9b
training:
  type: pg_opd
  hyper_parameters:
    learning_rate: 1.0e-6           # start small
    eval_steps: 5                   # validate every 5 steps
    # algorithm: grpo               # the default
    lr_warmup_steps: 0
    # trailing note about batch sizes
  resources:
    gpu_count: 8
eval_steps: 99                       # a top-level key with the same name: never touched
"""


def _hp(text: str) -> dict:
    return yaml.safe_load(text)["training"]["hyper_parameters"]


def test_a_changed_value_keeps_its_trailing_comment_at_its_column() -> None:
    out = edit_section(CONFIG, "hyper_parameters", {"eval_steps": 7})
    line = next(x for x in out.splitlines() if "eval_steps: 7" in x)
    old = next(x for x in CONFIG.splitlines() if "eval_steps: 5" in x)
    assert line.index("#") == old.index("#") and line.endswith("# validate every 5 steps")
    assert _hp(out)["eval_steps"] == 7 and yaml.safe_load(out)["eval_steps"] == 99
    assert out.replace("eval_steps: 7", "eval_steps: 5") == CONFIG  # nothing else changed


def test_none_deletes_the_key_and_only_that_line() -> None:
    out = edit_section(CONFIG, "hyper_parameters", {"lr_warmup_steps": None})
    assert "lr_warmup_steps" not in _hp(out)
    assert len(out.splitlines()) == len(CONFIG.splitlines()) - 1
    assert "# trailing note about batch sizes" in out


def test_a_commented_out_key_is_uncommented_in_place() -> None:
    out = edit_section(CONFIG, "hyper_parameters", {"algorithm": "grpo"})
    lines = out.splitlines()
    i = next(n for n, x in enumerate(lines) if "algorithm" in x)
    assert lines[i].startswith("    algorithm: grpo") and lines[i].endswith("# the default")
    assert i == CONFIG.splitlines().index("    # algorithm: grpo               # the default")
    assert _hp(out)["algorithm"] == "grpo"


def test_a_new_key_goes_at_the_end_of_its_section_with_its_indent() -> None:
    out = edit_section(CONFIG, "hyper_parameters", {"n_rollouts": 4})
    lines = out.splitlines()
    assert lines[lines.index("    n_rollouts: 4") - 1] == "    lr_warmup_steps: 0"
    assert _hp(out)["n_rollouts"] == 4
    res = edit_section(CONFIG, "resources", {"gpu_count": 16, "node_count": 2})
    assert yaml.safe_load(res)["training"]["resources"] == {"gpu_count": 16, "node_count": 2}


def test_floats_are_written_as_yaml_floats() -> None:
    assert yaml.safe_load(yaml_scalar(1e-6)) == 1e-6  # not the YAML 1.1 string "1e-6"
    assert yaml.safe_load(yaml_scalar("grpo")) == "grpo" and yaml_scalar(True) == "true"
    out = edit_section(CONFIG, "hyper_parameters", {"learning_rate": 2e-6})
    assert _hp(out)["learning_rate"] == 2e-6 and isinstance(_hp(out)["learning_rate"], float)


def test_the_final_newline_is_kept_or_not() -> None:
    assert edit_section(CONFIG, "hyper_parameters", {"eval_steps": 3}).endswith("never touched\n")
    bare = CONFIG.rstrip("\n")
    assert not edit_section(bare, "hyper_parameters", {"eval_steps": 3}).endswith("\n")


def test_an_unusual_layout_is_none_and_apply_values_re_dumps() -> None:
    flow = "training: {hyper_parameters: {eval_steps: 5}}\n"
    assert edit_section(flow, "hyper_parameters", {"eval_steps": 7}) is None
    out = apply_values(flow, {"hyper_parameters": {"eval_steps": 7, "n_epochs": 2}})
    assert _hp(out) == {"eval_steps": 7, "n_epochs": 2}
    missing = apply_values("name: x\n", {"resources": {"gpu_count": 8}})
    assert yaml.safe_load(missing) == {"name": "x", "training": {"resources": {"gpu_count": 8}}}


def test_apply_values_edits_each_section_by_lines() -> None:
    out = apply_values(CONFIG, {"hyper_parameters": {"eval_steps": 2}, "resources": {"gpu_count": 4}})
    assert _hp(out)["eval_steps"] == 2 and yaml.safe_load(out)["training"]["resources"]["gpu_count"] == 4
    assert "# OPD job configuration" in out and "# the job name" in out


def test_a_config_that_is_not_a_mapping_is_a_message() -> None:
    with pytest.raises(OpdError, match="not a mapping"):
        apply_values("- a\n- b\n", {"hyper_parameters": {"eval_steps": 1}})
