"""One rule per fact (issue 47): every surface takes the hyper-parameters' names, defaults and value sets
from the one typed model (``HyperParameters``, ``TrainingPlan``'s fields): ``--set``, the config form,
the preflight, the engine's plan and ``submit_job.py``'s generated key list.

Each surface is compared with the model's fields read directly (not through the derived table), then a
model with one value set and one default changed is swapped in, and every surface sees the change."""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from test_checks_config import config_text, make_workspace
from test_checks_contracts import _env  # noqa: F401 (the autouse fixture)

from opd_nb.checks import check_config_text
from opd_nb.engine import hparams
from opd_nb.engine.api import EngineError
from opd_nb.errors import OpdError
from opd_nb.notebook.form import UNSET
from opd_nb.spec import hyperparams
from opd_nb.spec.hyperparams import HP, HyperParameters, Resources, Row, param, rows_of
from opd_nb.spec.sets import full_key, parse_sets
from opd_nb.workspace import template_keys

UNREACHABLE = "http://127.0.0.1:9/api/v1"
SURFACES = ["--set", "form", "preflight", "engine", "submit_job.py"]


def _choices(name: str) -> list[Any] | None:
    """A field's value set as the model declares it: a Literal's values, else its row's choices."""
    field = HyperParameters.model_fields[name]
    if get_origin(field.annotation) is Literal:
        return list(get_args(field.annotation))
    row = next(m for m in field.metadata if isinstance(m, Row))
    return list(row.choices) if row.choices is not None else None


NAMES = list(HyperParameters.model_fields)
DEFAULTS = {name: field.default for name, field in HyperParameters.model_fields.items()}
CHOICES = {name: c for name in NAMES if (c := _choices(name)) is not None}


@pytest.fixture(scope="module")
def form_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from opd_nb.workspace.new import create

    return Path(create("reward", tmp_path_factory.mktemp("one-model") / "ws").path)


def _form(ws: Path, tmp: Path) -> Any:
    from opd_nb.notebook.form import ConfigForm

    dest = tmp / "form"
    shutil.copytree(ws, dest)
    return ConfigForm(dest)


def _options(form: Any, name: str) -> list[Any]:
    return [o[1] for o in form._widgets["fields"][name].options if o[1] != UNSET]


def _refused_by_preflight(tmp: Path, name: str, value: str) -> str | None:
    """The preflight's bad-value message for ``name: value`` (None: accepted)."""
    text = config_text(extra_hp=f"{name}: {value}\n")
    rep = check_config_text(text, make_workspace(tmp), "cloud", base_url=UNREACHABLE)
    hits = [f for f in rep.findings if f.rule == "config.bad-value" and name in f.message]
    return hits[0].message if hits else None


def _generated() -> dict[str, Any]:
    body = template_keys.committed(template_keys.script().read_text(encoding="utf-8"))
    return {
        node.targets[0].id: ast.literal_eval(node.value)  # type: ignore[attr-defined]
        for node in ast.parse(body).body
        if isinstance(node, ast.Assign)
    }


# ------------------------------------------------------------------ each surface against the model itself


def _set_surface(tmp: Path, form_ws: Path) -> None:
    assert [n for n in NAMES if full_key(n) == f"training.hyper_parameters.{n}"] == NAMES
    for name, choices in CHOICES.items():
        for choice in choices:
            assert parse_sets([f"{name}={choice}"]) == {f"training.hyper_parameters.{name}": choice}
        with pytest.raises(OpdError) as info:
            parse_sets([f"{name}=no-such-choice"])
        assert all(str(c) in str(info.value) for c in choices)


def _form_surface(tmp: Path, form_ws: Path) -> None:
    form = _form(form_ws, tmp)
    rows = [p for p in form.params if p.section == HP]
    assert [p.name for p in rows] == NAMES
    assert {p.name: p.default for p in rows} == DEFAULTS
    for name, choices in CHOICES.items():
        assert _options(form, name) == choices


def _preflight_surface(tmp: Path, form_ws: Path) -> None:
    assert {n: hyperparams.Written({}).get(n) for n in NAMES} == DEFAULTS  # the view the rules read
    for name, choices in CHOICES.items():
        message = _refused_by_preflight(tmp / name, name, "no-such-choice")
        assert message is not None and all(str(c) in message for c in choices), message


def _engine_surface(tmp: Path, form_ws: Path) -> None:
    assert hparams.resolve({}, student_params=1).hp.model_dump() == DEFAULTS
    for name, choices in CHOICES.items():
        with pytest.raises(EngineError) as info:
            hparams.resolve({name: "no-such-choice"}, student_params=1)
        assert all(str(c) in str(info.value) for c in choices)


def _submit_job_surface(tmp: Path, form_ws: Path) -> None:
    consts = _generated()
    assert list(consts["HYPER_PARAMETERS"]) == NAMES
    assert list(consts["RESOURCES"]) == list(Resources.model_fields)
    assert consts["DEFAULTS"] == {name: DEFAULTS[name] for name in consts["DEFAULTS"]}
    assert template_keys.main(["--check"]) == 0  # the committed block is the model's, as generated


CHECKS: dict[str, Callable[[Path, Path], None]] = {
    "--set": _set_surface,
    "form": _form_surface,
    "preflight": _preflight_surface,
    "engine": _engine_surface,
    "submit_job.py": _submit_job_surface,
}


@pytest.mark.parametrize("surface", SURFACES)
def test_each_surface_takes_names_defaults_and_choices_from_the_model(surface, tmp_path, form_ws):
    CHECKS[surface](tmp_path, form_ws)


# ------------------------------------------------------------------ a change in the model reaches them all


class Changed(HyperParameters):
    """The model with one value set and one default changed (a held-out edit in the one place)."""

    save_strategy: Literal["steps", "epoch", "no", "best"] = param(  # pyright: ignore[reportIncompatibleVariableOverride]
        "steps", "When to save checkpoints.", group="evaluation", small="steps", large="steps"
    )
    batch_size: int = param(256, "Prompts per training step.", group="throughput", ge=1, small=32, large=128)


@pytest.fixture()
def changed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The derived table (``PARAMS``, ``PARAMS_BY_NAME``) rebuilt from :class:`Changed`, in place."""
    rows = {p.name: p for p in rows_of(Changed, HP)}
    saved = list(hyperparams.PARAMS)
    for name, row in rows.items():
        monkeypatch.setitem(hyperparams.PARAMS_BY_NAME, name, row)
    hyperparams.PARAMS[:] = [rows.get(p.name, p) for p in saved]
    yield
    hyperparams.PARAMS[:] = saved


def _set_sees(tmp: Path, form_ws: Path) -> None:
    assert parse_sets(["save_strategy=best"]) == {"training.hyper_parameters.save_strategy": "best"}


def _form_sees(tmp: Path, form_ws: Path) -> None:
    form = _form(form_ws, tmp)
    assert "best" in _options(form, "save_strategy")
    assert next(p for p in form.params if p.name == "batch_size").default == 256
    form.set("save_strategy", "best")
    assert "save_strategy" not in form.field_problems()


def _preflight_sees(tmp: Path, form_ws: Path) -> None:
    assert hyperparams.Written({}).get("batch_size") == 256
    assert _refused_by_preflight(tmp, "save_strategy", "best") is None


def _engine_sees(tmp: Path, form_ws: Path) -> None:
    plan = hparams.resolve({"save_strategy": "best"}, student_params=1)
    assert (plan.hp.save_strategy, plan.hp.batch_size) == ("best", 256)


def _submit_job_sees(tmp: Path, form_ws: Path) -> None:
    assert '"batch_size": 256' in template_keys.render()
    assert template_keys.main(["--check"]) == 1  # the committed copy is now stale: the test would say so


SEES: dict[str, Callable[[Path, Path], None]] = {
    "--set": _set_sees,
    "form": _form_sees,
    "preflight": _preflight_sees,
    "engine": _engine_sees,
    "submit_job.py": _submit_job_sees,
}


@pytest.mark.parametrize("surface", SURFACES)
def test_a_change_in_the_model_is_seen_by_every_surface(surface, tmp_path, form_ws, changed):
    SEES[surface](tmp_path, form_ws)


def test_before_the_change_the_surfaces_refuse_it(tmp_path):
    with pytest.raises(OpdError):
        parse_sets(["save_strategy=best"])
    with pytest.raises(EngineError):
        hparams.resolve({"save_strategy": "best"}, student_params=1)
    assert _refused_by_preflight(tmp_path, "save_strategy", "best") is not None
