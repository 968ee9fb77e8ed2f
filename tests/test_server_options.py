"""`ServeOptions`: one frozen record from `opd serve` to the launched process (as JSON) to the app."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from opd_nb.errors import OpdError
from opd_nb.server import ServeOptions, start
from opd_nb.server.__main__ import _parser, options_from
from opd_nb.server.records import parse_model_map


def test_options_cross_the_process_boundary_whole(tmp_path):
    options = ServeOptions(
        port=0,
        data_dir=tmp_path,
        model_map={"m": str(tmp_path)},
        max_running=2,
        resume=False,
        max_deployments=4,
    )
    assert options.data_dir == str(tmp_path)  # a Path is kept as text (it is serialized)
    received = options_from(_parser().parse_args(["--options", options.model_dump_json()]))
    assert received == options
    with pytest.raises(ValidationError):
        options.port = 1  # frozen: nobody downstream changes what the front end decided


def test_a_flag_typed_by_hand_overrides_the_json(tmp_path):
    base = ServeOptions(port=8000, data_dir=str(tmp_path)).model_dump_json()
    args = _parser().parse_args(["--options", base, "--port", "0", "--max-interruptions", "0"])
    options = options_from(args)
    assert options.port == 0 and options.data_dir == str(tmp_path)
    assert options.max_interruptions == 1  # at least one, as `--max-interruptions` always was


def test_bad_options_are_one_line_and_exit_2():
    done = subprocess.run(
        [sys.executable, "-m", "opd_nb.server", "--port", "eighty"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: bad server options") and "port" in done.stderr


def test_one_model_map_parser(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert parse_model_map([f"qwen3-8b={tmp_path}"]) == {"qwen3-8b": str(tmp_path.resolve())}
    with pytest.raises(OpdError, match="must look like ID=PATH"):
        parse_model_map(["nope"])
    with pytest.raises(OpdError, match="not a Hugging Face model directory"):
        parse_model_map([f"m={tmp_path / 'missing'}"])


def test_start_takes_options_or_their_fields_not_both(tmp_path):
    with pytest.raises(TypeError, match="not both"):
        start(ServeOptions(data_dir=str(tmp_path)), port=0)
    with pytest.raises(ValidationError):
        start(data_dir=str(tmp_path), no_such_option=1)  # a misspelt option is an error, not ignored
