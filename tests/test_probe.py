"""`opd probe`: the teacher's ceiling and the student's floor on the workspace's own reward, with verdicts.

The rules are tested one by one on answers made here (no plane needed); the probe itself runs on the
session's `opd serve` with the bundled pair, each surface (core, CLI, magic, MCP) on the one result,
and the cloud path on Bailian's counting stand-in (only the real host is stood in for).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_workspace
from pydantic import SecretStr

from opd_nb.client import JobClient, Target
from opd_nb.errors import OpdError
from opd_nb.experiments.probe_plan import Budget, draw_rows
from opd_nb.experiments.probe_result import ProbeAnswer, Side, side_figures, teacher_beats_share
from opd_nb.experiments.probe_verdicts import (
    ProbeFacts,
    headroom,
    length_limit,
    reward_does_not_separate,
    reward_failures,
    reward_rejects_teacher,
    verdicts,
)
from opd_nb.paid.probe_record import config_hash, probe_hint, record_probe

PROMPTS, SAMPLES = 4, 2  # small: each server test stays a few seconds of calls


# ---- the rules, each on answers made here ---------------------------------------------------------
def _answers(teacher: list[float], student: list[float], **extra: Any) -> list[ProbeAnswer]:
    """Answers with these scores, SAMPLES per prompt in order, one chat call each."""
    out = []
    sides: tuple[tuple[Side, list[float]], ...] = (("teacher", teacher), ("student", student))
    for side, scores in sides:
        for i, s in enumerate(scores):
            out.append(
                ProbeAnswer(
                    side=side,
                    prompt=i // SAMPLES,
                    sample=i % SAMPLES,
                    score=s,
                    calls=1,
                    answer=f"{side} answer {i}",
                    **extra,
                )  # fmt: skip
            )
    return out


def _facts(answers: list[ProbeAnswer], estimate: str | None = "job: 3 steps") -> ProbeFacts:
    t = side_figures("teacher-model", [a for a in answers if a.side == "teacher"])
    s = side_figures("student-model", [a for a in answers if a.side == "student"])
    return ProbeFacts(t, s, teacher_beats_share(answers), answers, "reward r.py:R", estimate, 16)


def test_a_teacher_that_clearly_beats_the_student_means_opd_can_help():
    facts = _facts(_answers([1, 1, 1, 0, 1, 1], [0, 0, 1, 0, 0, 1]))
    v = headroom(facts)
    assert v is not None and v.code == "opd-can-help"
    assert any("job: 3 steps" in e for e in v.evidence)  # with the estimate `opd estimate` gives
    assert facts.teacher_beats_share == pytest.approx(2 / 3)
    assert "teacher beats student on 67% of prompts" in v.evidence  # a share said as one, not "0.6667 of"


@pytest.mark.parametrize(
    ("teacher", "student"),
    [([1, 0, 1, 0], [1, 0, 1, 0]), ([0.5, 0.6, 0.5, 0.6], [0.55, 0.6, 0.5, 0.6]), ([0.2, 0.3], [0.9, 0.8])],
)
def test_a_teacher_that_does_not_beat_the_student_means_no_headroom(teacher, student):
    v = headroom(_facts(_answers(teacher, student)))
    assert v is not None and v.code == "no-headroom" and "another teacher" in v.message


def test_teacher_answers_near_zero_point_at_the_reward_with_the_lowest_answers_and_reasons():
    answers = _answers([0, 0, 0.04, 0], [0, 0, 0, 0.5])
    answers[0].error, answers[0].reward_failed = "answer not in the expected format", False
    answers[1].metrics = {"contains_answer": 1.0}
    v = reward_rejects_teacher(_facts(answers))
    assert v is not None and v.code == "reward-rejects-teacher" and "reward function" in v.message
    assert "answer not in the expected format" in v.evidence[0] and "teacher answer 0" in v.evidence[0]
    assert any("contains_answer=1" in e for e in v.evidence)
    beaten = headroom(_facts(answers))
    assert beaten is not None and beaten.code == "no-headroom"  # and the student scores more


@pytest.mark.parametrize("score", [0.0, 0.5, 1.0])
def test_every_answer_scoring_the_same_means_the_reward_does_not_separate(score):
    facts = _facts(_answers([score] * 4, [score] * 4))
    v = reward_does_not_separate(facts)
    assert v is not None and v.code == "reward-does-not-separate" and "zero variance" in v.message
    assert v.evidence == ["4 of 4 groups have zero variance (reward r.py:R)"]
    assert getattr(headroom(facts), "code", None) == "no-headroom"
    assert reward_does_not_separate(_facts(_answers([score] * 4, [score] * 3 + [0.25]))) is None


def test_answers_at_the_length_limit_say_raise_max_length():
    answers = _answers([1, 1, 0, 1], [0, 0, 0, 1])
    for a in answers[4:6]:
        a.truncated = True  # half the student's answers cut
    v = length_limit(_facts(answers))
    assert v is not None and v.code == "length-limit" and "max_length" in v.message
    assert v.evidence == ["student: 0.5 of answers cut"]
    assert length_limit(_facts(_answers([1, 1, 0, 1], [0, 0, 0, 1]))) is None


def test_a_reward_that_fails_on_some_answers_says_which_and_its_error():
    answers = _answers([1, 1, 0, 1], [0, 0, 0, 1])
    answers[2].score, answers[2].error, answers[2].reward_failed = None, "timed out after 120 s", True
    v = reward_failures(_facts(answers))
    assert v is not None and v.code == "reward-fails"
    assert v.evidence == ["teacher prompt 1 sample 0: timed out after 120 s"]
    assert reward_failures(_facts(_answers([1], [0]))) is None


def test_verdicts_put_the_rewards_problems_first():
    codes = [v.code for v in verdicts(_facts(_answers([0] * 4, [0] * 4)))]
    assert codes == ["reward-does-not-separate", "reward-rejects-teacher", "no-headroom"]


# ---- the plan: what is probed, draw, budget, the submit hint ------------------------------------------------------
def test_a_workspace_without_a_teacher_or_data_is_one_line_naming_the_config(tmp_path):
    import yaml

    from opd_nb.experiments.probe_plan import plan_probe

    ws = tiny_workspace("reward", tmp_path / "ws")
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    (ws / "config.yaml").write_text(yaml.safe_dump({**cfg, "teacher_model": None}, sort_keys=False))
    with pytest.raises(OpdError, match="names no teacher_model") as no_teacher:
        plan_probe(ws, prompts=4, samples=2, seed=0)
    assert no_teacher.value.where == str(ws / "config.yaml") and "teacher_model:" in (
        no_teacher.value.fix or ""
    )
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    for name in ("train.jsonl", "validation.jsonl"):
        (ws / "data" / name).unlink()
    with pytest.raises(OpdError, match="no local validation or training data"):
        plan_probe(ws, prompts=4, samples=2, seed=0)


def test_training_rows_are_probed_when_there_is_no_validation_file(tmp_path):
    from opd_nb.experiments.probe_plan import plan_probe

    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=5)
    (ws / "data" / "validation.jsonl").unlink()
    plan = plan_probe(ws, prompts=32, samples=4, seed=0)
    assert plan.data == ws / "data" / "train.jsonl" and len(plan.rows) == 5
    assert (
        plan.max_tokens == plan.max_length - 40
    )  # the answer room a job gives (TINY_HP's max_prompt_length)


@pytest.mark.slow
def test_no_plane_at_the_url_is_one_line_before_any_answer(tmp_path):
    from opd_nb.experiments.probe import probe

    ws = tiny_workspace("pure-distill", tmp_path / "ws", val_rows=4)
    nowhere = JobClient(
        Target(kind="local", base_url="http://127.0.0.1:9/api/v1", api_key=SecretStr("local"))
    )
    with pytest.raises(
        OpdError, match=r"cannot probe (teacher|student) \S+: cannot reach the local control plane"
    ):
        probe(ws, client=nowhere, prompts=2, samples=1)


def test_prompts_are_drawn_by_seed():
    rows = [{"i": i} for i in range(20)]
    assert draw_rows(rows, 5, 1) == draw_rows(rows, 5, 1) != draw_rows(rows, 5, 2)
    assert sorted(r["i"] for r in draw_rows(rows, 50, 0)) == list(range(20))


@pytest.mark.parametrize(
    ("spec", "calls", "tokens"), [("3", 3, None), ("3calls", 3, None), ("90 tokens", None, 90)]
)
def test_a_budget_in_calls_or_tokens_is_never_passed(spec, calls, tokens):
    budget = Budget(spec)
    sent = sum(budget.reserve(30) for _ in range(10))
    assert sent == 3 and budget.refused
    assert (budget.calls_cap, budget.tokens_cap) == (calls, tokens)


@pytest.mark.parametrize("spec", ["lots", "-3", "3 dollars"])
def test_a_budget_that_is_not_calls_or_tokens_is_one_line(spec):
    with pytest.raises(OpdError, match="not a number of calls or tokens") as err:
        Budget(spec)
    assert "--budget 64" in (err.value.fix or "")


def test_submit_mentions_the_probe_once_per_config(tmp_path):
    ws = tiny_workspace("reward", tmp_path / "ws")
    line = probe_hint(ws)
    assert line is not None and "opd probe" in line
    assert probe_hint(ws) is None  # once
    (ws / "config.yaml").write_text((ws / "config.yaml").read_text() + "\n# changed\n")
    assert probe_hint(ws) is not None  # a new config: mentioned again

    (ws / "config.yaml").write_text((ws / "config.yaml").read_text() + "\n# probed\n")
    record_probe(ws, config_hash(ws), {"probed": True})
    assert probe_hint(ws) is None  # a probed config is never mentioned


# ---- the probe on the local plane -----------------------------------------------------------------
PLANTED = """
from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardOutput, TaskStatus


class RewardProcessor(AbstractRewardProcessor):
    async def process(self, input_data):
        return RewardOutput(reward=Reward(reward_score={score}, reward_metrics={{"planted": 1.0}}),
                            status=TaskStatus.SUCCESS, error=None)
"""


def _plant(ws: Path, score: float) -> Path:
    (ws / "functions" / "reward" / "reward.py").write_text(PLANTED.format(score=score))
    return ws


@pytest.fixture(scope="module")
def client(local_server):
    return JobClient(Target(kind="local", base_url=local_server.api_base, api_key=SecretStr("test")))


def _probe(ws: Path, client: JobClient, **kw: Any):
    from opd_nb.experiments.probe import probe

    return probe(ws, client=client, prompts=PROMPTS, samples=SAMPLES, **kw)


@pytest.mark.slow
def test_on_the_template_reward_workspace_the_teacher_beats_the_student(local_server, tmp_path):
    """Through the CLI (`--json`, every figure): the bundled teacher beats the bundled student on the
    template's reward, and the verdict says OPD can help, with the job's estimate."""
    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=8)
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "probe", str(ws), "-n", "6", "-k", "2", "--local", local_server.base_url,
         "--json"], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["mode"] == "native" and out["scorer"].startswith("reward functions/reward/reward.py")
    assert out["teacher"]["mean"] > out["student"]["mean"] + 0.1
    assert out["verdicts"][-1]["code"] == "opd-can-help"
    assert any("opd estimate" in e for e in out["verdicts"][-1]["evidence"])
    assert out["calls_sent"] == out["cost"]["chat_calls"] == 6 * 2 * 2
    assert set(out["teacher"]["metrics"]) == {"contains_answer", "length_match"}  # the reward's own
    for side in ("teacher", "student"):
        assert {"spread", "truncated_share", "answer_tokens_mean", "zero_variance_groups"} <= set(out[side])
    assert 0 < out["teacher_beats_share"] <= 1 and len(out["answers"]) == 24
    assert probe_hint(ws) is None  # the probe is recorded for this config: submit does not mention it


@pytest.mark.slow
def test_a_reward_that_returns_zero_is_named_with_the_teachers_answers(client, tmp_path):
    ws = _plant(tiny_workspace("reward", tmp_path / "ws", val_rows=8), 0.0)
    result = _probe(ws, client)
    rejects = next(v for v in result.verdicts if v.code == "reward-rejects-teacher")
    assert "reward function likely rejects good answers" in rejects.message
    teacher_answers = {a.answer[:120] for a in result.answers if a.side == "teacher"}
    assert rejects.evidence and all("planted=1" in e for e in rejects.evidence)
    assert all(any(repr(t) in e for t in teacher_answers) for e in rejects.evidence)
    assert "opd-can-help" not in result.verdict_codes()


@pytest.mark.slow
def test_a_constant_reward_does_not_separate_answers(client, tmp_path):
    ws = _plant(tiny_workspace("reward", tmp_path / "ws", val_rows=8), 0.5)
    result = _probe(ws, client)
    assert result.verdict_codes() == ["reward-does-not-separate", "no-headroom"]
    assert result.teacher.zero_variance_groups == result.teacher.groups == PROMPTS


@pytest.mark.slow
def test_the_student_as_its_own_teacher_has_no_headroom(client, tmp_path):
    import yaml

    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=8)
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    cfg["teacher_model"] = cfg["model"]["name"]
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    result = _probe(ws, client)
    assert result.teacher.mean == result.student.mean and result.teacher_beats_share == 0
    assert result.calls_sent == result.cost.chat_calls == PROMPTS * SAMPLES  # its answers are the student's
    assert result.verdict_codes()[-1] == "no-headroom"  # (with the reward's verdict first if both score ~0)


@pytest.mark.slow
def test_an_agentic_workspace_probes_through_its_rollout_function(client, tmp_path):
    ws = tiny_workspace("agentic", tmp_path / "ws", val_rows=8)
    result = _probe(ws, client)
    assert result.mode == "agentic"
    assert all(a.calls >= 1 and a.error is None for a in result.answers), [a.error for a in result.answers]
    assert result.calls_sent == sum(a.calls for a in result.answers) >= PROMPTS * SAMPLES * 2
    assert result.teacher.scored == result.student.scored == PROMPTS * SAMPLES
    assert result.verdicts  # the rules ran over the rollouts' rewards


@pytest.mark.slow
def test_the_magic_shows_the_probe_view_saved_as_its_snapshot(local_server, tmp_path):
    """`%opd probe` goes through the CLI's parser; the view is final, its output the static snapshot."""
    from opd_nb.cli import invoke
    from opd_nb.cli.intents import ProbeRequest
    from opd_nb.notebook.views import open_view

    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=8)
    request = invoke(
        ["probe", str(ws), "-n", str(PROMPTS), "-k", str(SAMPLES), "--local", local_server.base_url]
    )
    assert isinstance(request, ProbeRequest)
    view = open_view(request)
    bundle = view._repr_mimebundle_()
    assert view.final and "application/vnd.jupyter.widget-view+json" not in bundle
    html = bundle["text/html"]
    assert "<svg" in html and "lowest-scoring teacher answers" in html and "opd-can-help" in html
    assert "<script" not in html


# ---- the cloud path, against Bailian's counting stand-in ------------------------------------------
@pytest.mark.slow
def test_a_cloud_probe_sends_nothing_without_yes_then_exactly_its_estimate_and_the_budget_stops_it(
    local_server, tmp_path
):
    from bailian_standin import CountingProxy

    from opd_nb.experiments.probe import probe

    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=8)
    proxy = CountingProxy(local_server.base_url)
    try:
        cloud = JobClient(Target(kind="cloud", base_url=proxy.api_base, api_key=SecretStr("sk-standin-0000")))
        with pytest.raises(OpdError) as refused:
            probe(ws, client=cloud, prompts=PROMPTS, samples=SAMPLES, price=2.0)
        assert refused.value.code == "needs-confirmation" and "16 chat calls" in str(refused.value)
        assert proxy.requests == []
        result = probe(ws, client=cloud, prompts=PROMPTS, samples=SAMPLES, yes=True)
        sent = sum(1 for method, _ in proxy.requests if method == "POST")
        assert sent == result.cost.chat_calls == result.calls_sent == PROMPTS * SAMPLES * 2
        proxy.requests.clear()
        capped = probe(ws, client=cloud, prompts=PROMPTS, samples=SAMPLES, yes=True, budget="5")
    finally:
        proxy.close()
    assert sum(1 for method, _ in proxy.requests if method == "POST") == 5 == capped.calls_sent
    assert capped.stopped_by_budget and "budget" in str(capped)


@pytest.mark.slow
def test_the_cli_refuses_a_cloud_probe_without_yes_and_says_what_it_costs(tmp_path):
    from bailian_standin import CountingProxy

    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=40)  # more rows than the default N
    proxy = CountingProxy("http://127.0.0.1:9")  # answers nothing: a request that got through would show
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_"))}
    env.update(DASHSCOPE_API_KEY="sk-standin-0000000000", OPD_CLOUD_BASE_URL=proxy.api_base)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "opd_nb", "probe", str(ws), "--cloud", "--price", "3"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    finally:
        proxy.close()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "256 chat calls" in proc.stderr and "32 prompts x 4 samples x 2 models" in proc.stderr  # N, K
    assert "--yes" in proc.stderr and "per million tokens" in proc.stderr
    assert proxy.requests == []


@pytest.mark.slow
def test_the_mcp_tool_is_two_calls_on_the_cloud_and_probes_locally(local_server, tmp_path, monkeypatch):
    import anyio
    from bailian_standin import CountingProxy
    from mcp import Client

    from opd_nb.agent.server import build

    ws = str(tiny_workspace("reward", tmp_path / "ws", val_rows=8))
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-standin-0000000000")
    proxy = CountingProxy("http://127.0.0.1:9")
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    args = {"workspace": ws, "prompts": PROMPTS, "samples": SAMPLES}

    async def go() -> tuple[dict, dict]:
        async with Client(build()) as mcp:
            cloud = await mcp.call_tool("probe", {**args, "target": "cloud", "base_url": proxy.api_base})
            local = await mcp.call_tool(
                "probe", {**args, "target": "local", "base_url": local_server.base_url}
            )
            return cloud.structured_content, local.structured_content

    try:
        cloud, local = anyio.run(go)
    finally:
        proxy.close()
    assert proxy.requests == [] and cloud["status"] == "needs_confirmation"
    assert "16 chat calls" in cloud["confirmation"]["summary"]
    assert local["status"] == "started" and local["result"]["verdicts"][-1]["code"] == "opd-can-help"


@pytest.mark.slow  # two submits' preflights in subprocesses
def test_opd_submit_mentions_the_probe_once_for_an_unprobed_config(tmp_path):
    """The CLI's submit says it before its consent refusal (nothing sent on the stand-in), once per config."""
    from bailian_standin import CountingProxy

    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=24)
    proxy = CountingProxy("http://127.0.0.1:9")  # answers nothing: a request that got through would show
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_"))}
    env.update(DASHSCOPE_API_KEY="sk-standin-0000000000", OPD_CLOUD_BASE_URL=proxy.api_base)
    submit = [sys.executable, "-m", "opd_nb", "submit", str(ws), "--cloud"]
    try:
        first, second = (
            subprocess.run(submit, capture_output=True, text=True, timeout=120, env=env) for _ in "12"
        )
    finally:
        proxy.close()
    assert first.returncode == second.returncode == 1 and proxy.job_creations() == 0
    assert first.stderr.count("`opd probe ") == 1 and "add --yes" in first.stderr
    assert "opd probe" not in second.stderr and "add --yes" in second.stderr


FAILING = """
from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardOutput, TaskStatus


class RewardProcessor(AbstractRewardProcessor):
    async def process(self, input_data):
        if int(str(input_data.ground_truth)[-1]) % 2:
            raise ValueError("planted failure on odd solutions")
        return RewardOutput(reward=Reward(reward_score=1.0, reward_metrics={}), status=TaskStatus.SUCCESS)
"""


@pytest.mark.slow
def test_a_reward_that_fails_on_some_answers_is_named_with_the_functions_error(client, tmp_path):
    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=8)
    (ws / "functions" / "reward" / "reward.py").write_text(FAILING)
    result = _probe(ws, client)
    fails = next(v for v in result.verdicts if v.code == "reward-fails")
    failed = [a for a in result.answers if a.reward_failed]
    assert 0 < len(failed) < len(result.answers) and result.teacher.failed + result.student.failed == len(
        failed
    )
    assert all("planted failure on odd solutions" in e for e in fails.evidence)


@pytest.mark.slow
def test_a_pure_distillation_workspace_is_scored_by_exact_match(client, tmp_path):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", val_rows=8)
    result = _probe(ws, client)
    assert result.scorer == "exact_match" and set(result.teacher.metrics) == {"exact_match"}
    assert result.teacher.mean is not None and result.student.mean is not None
    assert result.teacher.mean > result.student.mean


@pytest.mark.slow
def test_the_magics_submit_shows_the_probe_mention_it_records(tmp_path, monkeypatch):
    """`%opd submit` gets no stderr: the mention travels in what it shows (here the consent refusal on
    the stand-in, nothing sent), and is recorded only as shown, once per config."""
    from bailian_standin import CountingProxy

    from opd_nb.cli import invoke

    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=24)
    proxy = CountingProxy("http://127.0.0.1:9")  # answers nothing: a request that got through would show
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-standin-0000000000")
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    try:
        refusals = []
        for _ in "12":
            with pytest.raises(OpdError) as refused:
                invoke(["submit", str(ws), "--cloud"])
            refusals.append(str(refused.value))
    finally:
        proxy.close()
    assert proxy.job_creations() == 0 and all("needs your confirmation" in r for r in refusals)
    assert refusals[0].count("`opd probe ") == 1 and "opd probe" not in refusals[1]


@pytest.mark.slow
def test_a_local_submit_by_magic_or_mcp_carries_the_probe_mention_in_its_notes(local_server, tmp_path):
    """Each surface's submit shows the mention in its result's notes (the view's, the tool's), once."""
    import anyio
    from mcp import Client

    from opd_nb.agent.server import build
    from opd_nb.cli import invoke

    magic_ws = tiny_workspace("reward", tmp_path / "magic", train_rows=4)
    submit = ["submit", str(magic_ws), "--local", local_server.base_url, "--no-check"]
    first, second = invoke(submit).note_lines(), invoke(submit).note_lines()
    assert sum("`opd probe " in n for n in first) == 1 and not any("opd probe" in n for n in second)

    mcp_ws = str(tiny_workspace("reward", tmp_path / "mcp", train_rows=24))  # passes the gate

    async def go() -> list[dict]:
        args = {"workspace": mcp_ws, "target": "local", "base_url": local_server.base_url}
        async with Client(build()) as mcp:
            out = []
            for _ in "12":
                called = await mcp.call_tool("submit", args)
                assert not called.is_error, called.content[0]
                out.append(called.structured_content)
            return out

    tool_first, tool_second = anyio.run(go)
    notes = [tool_first["result"]["notes"], tool_second["result"]["notes"]]
    assert sum("`opd probe " in n for n in notes[0]) == 1 and not any("opd probe" in n for n in notes[1])


# ---- `-c/--config`: another job YAML in the workspace, probed and recorded as its own --------------------
SAME = "config_same_teacher.yaml"  # the student as its own teacher: no headroom, whatever the reward


def _second_config(ws: Path, file: str = SAME, **changes: Any) -> Path:
    import yaml

    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    cfg["teacher_model"] = cfg["model"]["name"]
    (ws / file).write_text(yaml.safe_dump({**cfg, **changes}, sort_keys=False))
    return ws


@pytest.mark.slow
def test_the_plan_reads_the_named_config_its_models_data_and_functions(tmp_path):
    from opd_nb.experiments.probe_plan import plan_probe

    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=8, train_rows=5)
    (ws / "data" / "probe_rows.jsonl").write_text((ws / "data" / "train.jsonl").read_text())
    _second_config(ws, datasets=[{"type": "validation", "file_name": "data/probe_rows.jsonl"}])
    default, other = (plan_probe(ws, prompts=32, samples=1, seed=0, config=c) for c in ("config.yaml", SAME))
    assert not default.same_model and other.same_model and other.config == SAME
    assert (
        default.data.name == "validation.jsonl"
        and other.data.name == "probe_rows.jsonl"
        and len(other.rows) == 5
    )
    assert other.config_hash == config_hash(ws, SAME) != default.config_hash == config_hash(ws)
    agentic = _second_config(tiny_workspace("agentic", tmp_path / "agentic"), "config_agentic.yaml")
    (agentic / "config.yaml").write_text(
        (agentic / "config.yaml").read_text().replace("teacher_model:", "# teacher_model:")
    )
    plan = plan_probe(agentic, prompts=2, samples=1, seed=0, config="config_agentic.yaml")
    assert plan.agentic and plan.same_model  # the rollout function, from the named config
    with pytest.raises(OpdError, match="config.yaml names no teacher_model") as no_teacher:
        plan_probe(agentic, prompts=2, samples=1, seed=0)
    assert no_teacher.value.where == str(agentic / "config.yaml")
    _second_config(ws, "config_no_teacher.yaml", teacher_model=None)
    with pytest.raises(OpdError, match="config_no_teacher.yaml names no teacher_model") as named:
        plan_probe(ws, prompts=2, samples=1, seed=0, config="config_no_teacher.yaml")
    assert named.value.where == str(ws / "config_no_teacher.yaml")  # the file to fix, not config.yaml


@pytest.mark.slow
def test_a_config_that_is_not_there_is_one_line_on_every_surface(tmp_path):
    """The CLI, the magic (the CLI's parser), the core and the MCP tool: submit's rule, nothing sent."""
    import anyio
    from mcp import Client

    from opd_nb.agent.server import build
    from opd_nb.cli import invoke
    from opd_nb.experiments.probe import probe

    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=4)
    nowhere = "http://127.0.0.1:9"
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "probe", str(ws), "-c", "nope.yaml", "--local", nowhere],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"no nope.yaml in {ws}" in proc.stderr and "-c/--config" in proc.stderr
    with pytest.raises(OpdError, match="no nope.yaml in") as magic:
        invoke(["probe", str(ws), "--config", "nope.yaml", "--local", nowhere])
    with pytest.raises(OpdError, match="no nope.yaml in") as core:
        probe(ws, config="nope.yaml")
    with pytest.raises(OpdError, match="no nope.yaml in") as submit:  # the rule the probe shares
        invoke(["submit", str(ws), "-c", "nope.yaml", "--local", nowhere])
    assert magic.value.fix == core.value.fix == submit.value.fix and "-c/--config" in (core.value.fix or "")

    async def go() -> Any:
        async with Client(build()) as mcp:
            return await mcp.call_tool(
                "probe",
                {"workspace": str(ws), "config": "nope.yaml", "target": "local", "base_url": nowhere},
            )

    called = anyio.run(go)
    assert called.is_error and "no nope.yaml in" in called.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in called.content[0].text  # type: ignore[union-attr]


def test_the_probe_record_and_the_submit_mention_are_per_config(tmp_path):
    ws = _second_config(tiny_workspace("reward", tmp_path / "ws"))
    record_probe(ws, config_hash(ws, SAME), {"probed": True})
    assert probe_hint(ws, SAME) is None  # probed: never mentioned
    line = probe_hint(ws)  # config.yaml was not probed
    assert line is not None and f"`opd probe {ws}` checks" in line
    _second_config(ws, "config_other.yaml", name="other")
    line = probe_hint(ws, "config_other.yaml")
    assert line is not None and f"`opd probe {ws} -c config_other.yaml`" in line  # the command to run
    assert probe_hint(ws, "config_other.yaml") is None and probe_hint(ws) is None  # each once


@pytest.mark.slow
def test_the_magics_submit_with_a_config_mentions_the_probe_only_for_an_unprobed_one(tmp_path, monkeypatch):
    """`%opd submit -c` (the CLI's parser, to the consent refusal on the stand-in, nothing sent): a probed
    config is not mentioned, an unprobed one once."""
    from bailian_standin import CountingProxy

    from opd_nb.cli import invoke

    ws = _second_config(tiny_workspace("reward", tmp_path / "ws", train_rows=24))
    _second_config(ws, "config_other.yaml", name="other")
    record_probe(ws, config_hash(ws, SAME), {"probed": True})
    proxy = CountingProxy("http://127.0.0.1:9")  # answers nothing: a request that got through would show
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-standin-0000000000")
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    refusals: dict[str, list[str]] = {}
    try:
        for config in (SAME, "config_other.yaml", "config_other.yaml"):
            with pytest.raises(OpdError) as refused:
                invoke(["submit", str(ws), "-c", config, "--cloud"])
            refusals.setdefault(config, []).append(str(refused.value))
    finally:
        proxy.close()
    assert proxy.job_creations() == 0
    assert all("needs your confirmation" in r for rs in refusals.values() for r in rs)
    assert "opd probe" not in refusals[SAME][0]
    first, second = refusals["config_other.yaml"]
    assert first.count("-c config_other.yaml` checks") == 1 and "opd probe" not in second


@pytest.mark.slow
def test_a_probe_of_another_config_probes_its_teacher_and_is_recorded_for_it(local_server, client, tmp_path):
    """`opd probe WS -c FILE` (the parser the terminal and the magic share, then its one call into the
    core): the second config's teacher is the student, so no headroom; config.yaml stays unprobed."""
    from opd_nb.cli import invoke
    from opd_nb.cli.probe import run_request

    ws = _second_config(tiny_workspace("reward", tmp_path / "ws", val_rows=8))
    request = invoke(
        [
            "probe",
            str(ws),
            "-c",
            SAME,
            "-n",
            str(PROMPTS),
            "-k",
            str(SAMPLES),
            "--local",
            local_server.base_url,
        ]
    )
    assert request.config == SAME and request.to_payload()["config"] == SAME
    result = run_request(client, request)
    assert result.config == SAME and result.config_hash == config_hash(ws, SAME) and SAME in str(result)
    assert result.calls_sent == PROMPTS * SAMPLES and result.teacher_beats_share == 0  # one model sampled
    assert result.verdict_codes()[-1] == "no-headroom"
    assert probe_hint(ws, SAME) is None  # the submit of the probed config does not mention it
    assert probe_hint(ws) is not None  # config.yaml's was not run


@pytest.mark.slow
def test_the_mcp_tool_probes_the_config_it_names_and_its_token_is_bound_to_that_file(
    local_server, tmp_path, monkeypatch
):
    import anyio
    from bailian_standin import CountingProxy
    from mcp import Client

    from opd_nb.agent.server import build

    ws = _second_config(tiny_workspace("reward", tmp_path / "ws", val_rows=8))
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-standin-0000000000")
    proxy = CountingProxy("http://127.0.0.1:9")
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    args = {"workspace": str(ws), "prompts": PROMPTS, "samples": SAMPLES, "config": SAME}
    cloud = {**args, "target": "cloud", "base_url": proxy.api_base}

    async def go() -> tuple[dict, str, dict, dict]:
        async with Client(build()) as mcp:
            first = await mcp.call_tool("probe", cloud)
            assert not first.is_error, first.content[0]
            asked = first.structured_content
            token = asked["confirmation"]["confirmation_token"]
            kept = (ws / SAME).read_text()
            (ws / SAME).write_text(kept + "\n# changed after the user said yes\n")
            stale = await mcp.call_tool("probe", {**cloud, "confirmation_token": token})
            (ws / SAME).write_text(kept)
            local = {**args, "target": "local", "base_url": local_server.base_url}
            same = (await mcp.call_tool("probe", local)).structured_content
            default = (await mcp.call_tool("probe", {**local, "config": "config.yaml"})).structured_content
            return asked, stale.content[0].text, same, default  # type: ignore[union-attr]

    try:
        asked, stale, same, default = anyio.run(go)
    finally:
        proxy.close()
    assert proxy.requests == [] and asked["status"] == "needs_confirmation"
    assert "8 chat calls" in asked["confirmation"]["summary"]  # N x K x 1 model: the named config's pair
    assert "another probe request" in stale  # the token binds the named config file's bytes
    assert same["result"]["config"] == SAME and same["result"]["verdicts"][-1]["code"] == "no-headroom"
    assert default["result"]["verdicts"][-1]["code"] == "opd-can-help"
