"""The saved rollout viewer and eval tables in Chromium, with no kernel and no network (the HTML a saved
notebook keeps, followed by static/snapshot.js): a row click moves the ▶ mark and the highlight to
that row and brings its sample into sight below a long table; a text column ("046", "0278") sorts as
text, a number column as numbers; the hint line says what the saved view does. The same snapshot with
its script stripped (an untrusted notebook) says how to get that back. The JupyterLab path is
tests/test_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM, chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]

MARK = "\u25b6"
PROMPTS = ["046", "0278", "5", "12", "0031", "9", "70", "300"]


def _record(i: int) -> dict:
    tokens = [
        {"text": ch, "student_logprob": -0.1 * (j + 1), "teacher_logprob": -0.2 * (i % 3) - 0.05 * j}
        for j, ch in enumerate(f"<think>n</think>{i:04d}")
    ]
    return {
        "kind": "validation",
        "step": 8,
        "group": i // 2,
        "sample": i % 2,
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        "completion": "".join(t["text"] for t in tokens),
        "tokens": tokens,
        "reward_score": (i * 7 % 10) / 10,
        "reward_status": "SUCCESS",
    }


def _viewer_page(tmp_path: Path, n: int = 64, *, strip_scripts: bool = False) -> Path:
    from opd_nb.client.rollout_results import SORTS
    from opd_nb.notebook.rollout_html import viewer_html
    from opd_nb.notebook.snapshot import interactive

    records = [_record(i) for i in range(n)]
    state = {
        "job_id": "ft-202612010000-aaaaaa",
        "note": None,
        "step": 8,
        "steps": [0, 4, 8],
        "kind": "validation",
        "sort_label": SORTS["order"],
        "order": list(range(n)),
        "selected": 0,
    }
    body = interactive(viewer_html(state, records))
    if strip_scripts:  # what JupyterLab's sanitizer leaves of an untrusted output: no script
        body = body[: body.index("<script>")]
    path = tmp_path / "viewer.html"
    path.write_text(f"<!doctype html><html><body>{body}</body></html>")
    return path


@pytest.fixture()
def driver():  # noqa: ANN201
    if not HAVE_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    d = chromium(window="1200,800")
    yield d
    d.quit()


def _rows(driver) -> list:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "tbody tr[data-sample]")


def test_a_row_click_marks_the_row_and_shows_its_sample_in_sight(driver, tmp_path: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    driver.get(_viewer_page(tmp_path).as_uri())
    rows = _rows(driver)
    assert len(rows) == 64 and rows[0].text.startswith(MARK)
    assert (
        "click a column to sort, a row to show its sample"
        in driver.find_element(By.CSS_SELECTOR, ".opd-snap-hint").text
    )
    target = rows[50]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", target)
    target.click()
    marked = [r.get_attribute("data-sample") for r in _rows(driver) if r.text.startswith(MARK)]
    assert marked == ["50"], marked  # the mark moved: one row, the clicked one
    assert target.get_attribute("aria-selected") == "true"
    assert target.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "transparent")
    assert _rows(driver)[0].value_of_css_property("background-color") == "rgba(0, 0, 0, 0)"
    pane = driver.find_element(By.CSS_SELECTOR, '.opd-sample[data-sample="50"]')
    top, bottom, height = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom, window.innerHeight]", pane
    )
    assert pane.is_displayed() and 0 <= top < height, (top, bottom, height)  # in sight, not below the table
    shown = [p for p in driver.find_elements(By.CSS_SELECTOR, ".opd-sample") if p.is_displayed()]
    assert shown == [pane]
    # the # column still sorts as numbers with the mark on a row
    header = driver.find_elements(By.CSS_SELECTOR, "thead th")[0]
    header.click()
    header.click()
    first = _rows(driver)[0].find_element(By.TAG_NAME, "td").text
    assert first.lstrip(MARK) == "63", first


def test_text_columns_sort_as_text_and_numbers_as_numbers(driver, tmp_path: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    driver.get(_viewer_page(tmp_path, n=8).as_uri())
    heads = driver.find_elements(By.CSS_SELECTOR, "thead th")
    names = [h.text for h in heads]

    def column(name: str) -> list[str]:
        col = names.index(name)
        return [r.find_elements(By.TAG_NAME, "td")[col].text for r in _rows(driver)]

    heads[names.index("prompt")].click()
    assert column("prompt") == sorted(
        PROMPTS
    )  # "0031" < "0278" < "046" < "12" < ...: text, not 31 < 46 < 278
    heads[names.index("reward")].click()
    rewards = [float(v) for v in column("reward")]
    assert rewards == sorted(rewards)


def test_an_untrusted_snapshot_says_how_to_make_it_interactive(driver, tmp_path: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    driver.get(_viewer_page(tmp_path, strip_scripts=True).as_uri())
    hint = driver.find_element(By.CSS_SELECTOR, ".opd-snap-hint").text
    assert "trust the notebook" in hint and "re-run this cell" in hint
    assert len(_rows(driver)) == 64  # still the whole table, and the selected sample
    assert [p for p in driver.find_elements(By.CSS_SELECTOR, ".opd-sample") if p.is_displayed()]
