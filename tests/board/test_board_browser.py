"""`tether board` in a real headless Chromium: a live run, a new line, a stop's timeline.

One browser and one board process for the module; the board serves a real run (a
command agent in a real lane) of the module's own tether home. Screenshots of the live
run and of the stop's timeline are kept in the test's temporary folder.
"""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.cli._run import TETHER, person_env
from tests.machine import missing, which
from tests.runs.support import make_repo, write_plan
from tests.waiting import wait_until

from tether._board._app import REFUSED
from tether.runs._lane_git import lane_log
from tether.runs._lane_log import LaneLog
from tether.stop import set_stop

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = which("chromium")
CHROMEDRIVER = which("chromedriver")
LINE_BOUND = 1.0
"""Seconds from a line written to the lane log to the line on screen (spec 05)."""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _needs_chromium() -> None:
    """Before anything starts: skip without the browser (CI must have it)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        missing(
            "the board's browser tests",
            "needs Chromium and its driver: apt-get install chromium chromium-driver",
        )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("board-home")


@pytest.fixture(autouse=True)
def _module_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_HOME", str(home))


@pytest.fixture(scope="module")
def browser(started: dict) -> Iterator[WebDriver]:
    """Headless Chromium, started while the run and the board start."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or "chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(flag)
    options.add_argument("--window-size=1200,800")
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=CHROMEDRIVER)
    )
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def started(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A real run (one item, a command agent that commits, says a line and waits),
    and a board serving this home, both starting."""
    root = tmp_path_factory.mktemp("board-run")
    env = {**person_env(), "TETHER_HOME": str(home)}
    marks = root / "marks"
    marks.mkdir()
    repo = make_repo(root)
    script = (
        "echo one > one.txt && git add one.txt && git commit -qm one && "
        "echo 'agent working on it' && "
        'touch "$MARKS/busy"; n=0; '
        'while [ ! -e "$MARKS/go" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done'
    )
    plan = write_plan(
        root,
        repo,
        items=["fix-typo"],
        stages=[("work", script), ("more", "true")],
        lanes=1,
    )
    run_env = {**env, "MARKS": str(marks), "TETHER_WRITABLE": str(marks)}
    run = subprocess.Popen(
        [*TETHER, "run", str(plan)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=run_env,
    )
    board = subprocess.Popen(
        [*TETHER, "board", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield {"marks": marks, "env": env, "run": run, "board": board}
    finally:
        (marks / "go").touch()
        for proc in (run, board):
            if proc.poll() is None:
                proc.terminate()
            proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def work(started: dict, browser: WebDriver) -> dict:
    """The board's URL, the run's id and process, the marks folder: the agent busy."""
    run, board, marks = started["run"], started["board"], started["marks"]
    assert run.stdout is not None
    assert board.stdout is not None
    run_id = run.stdout.readline().split()[1]
    url = board.stdout.readline().split()[-1]
    assert url.startswith("http://127.0.0.1:"), url
    wait_until(lambda: (marks / "busy").exists(), what="the agent busy")
    return {"url": url, "run": run_id, "marks": marks, "proc": run}


def _base(url: str) -> str:
    return url.split("/?", 1)[0]


def _text(browser: WebDriver, selector: str) -> str:
    """The text of the first element `selector` finds now ("" when none): read in one
    script, as the live page replaces a run's section when it changes."""
    return browser.execute_script(
        "const e = document.querySelector(arguments[0]);return e ? e.textContent : '';",
        selector,
    )


def _steps(browser: WebDriver) -> list[str]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('ol.timeline li'),"
        " (li) => li.dataset.what);"
    )


def _state(browser: WebDriver) -> str:
    return browser.execute_script(
        "const e = document.querySelector('section.run');"
        "return e ? e.dataset.state : '';"
    )


def test_a_request_without_the_token_is_refused(work: dict, browser: WebDriver) -> None:
    base = _base(work["url"])
    for path in ("/", "/events", "/digest", "/board.js"):
        answer = httpx.get(base + path)
        assert answer.status_code == 403
        assert answer.text == REFUSED
        assert work["run"] not in answer.text
    wrong = httpx.get(base + "/?token=not-the-token")
    assert wrong.status_code == 403
    assert "fix-typo" not in wrong.text
    # Another name for the server (a rebinding page) is refused even with the token.
    assert httpx.get(work["url"], headers={"Host": "evil.example"}).status_code == 400
    # Read-only: no verb but GET, even with the token.
    cookie = {"tether_board_" + base.rsplit(":", 1)[1]: work["url"].split("token=")[1]}
    assert httpx.post(base + "/", cookies=cookie).status_code == 405
    assert httpx.get(base + "/", cookies=cookie).status_code == 200
    browser.get(base + "/")
    assert "needs the board's token" in browser.page_source
    assert work["run"] not in browser.page_source


def test_the_page_shows_a_live_run_and_a_new_line_within_a_second(
    work: dict, browser: WebDriver, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(work["url"])
    assert "token=" not in browser.current_url  # the token went into a cookie
    run_id = work["run"]
    assert run_id in _text(browser, "section.run")
    assert _state(browser) == "running"
    wait = WebDriverWait(browser, 10, poll_frequency=0.02)
    wait.until(lambda d: "agent working on it" in _text(d, "td.line"))
    wait.until(lambda d: _text(d, "#live") == "live")  # its event stream is open
    assert "fix-typo" in _text(browser, "section.run")
    shot = tmp_path_factory.getbasetemp() / "board-live-run.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    browser.execute_script("window.notReloaded = true;")
    # A new line, with markup and a terminal escape in it: shown as text, on time.
    lane = next(p for p in lane_log(run_id, "x").parent.glob("*.log"))
    said = "<b>step 2</b> \x1b]52;c;aGk=\x07 done"
    with LaneLog(lane) as log:
        log.write(said + "\n")
        written = time.monotonic()
    wait.until(lambda d: "step 2" in _text(d, "td.line"))
    took = time.monotonic() - written
    assert took <= LINE_BOUND, f"the new line took {took:.3f} s to show"
    assert _text(browser, "td.line").startswith("<b>step 2</b>")
    assert "\x1b" not in _text(browser, "td.line")
    assert not browser.find_elements(By.CSS_SELECTOR, "td.line b")
    assert browser.execute_script("return window.notReloaded === true;")


def test_a_stop_s_timeline_shows_as_it_happens(
    work: dict, browser: WebDriver, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    if work["run"] not in _text(browser, "section.run"):
        browser.get(work["url"])
    browser.execute_script("window.notReloaded = true;")
    set_stop("lunch")
    wait = WebDriverWait(browser, 30, poll_frequency=0.05)
    wait.until(lambda d: "stop seen" in _steps(d))
    assert "halted" not in _steps(browser)  # the agent is still in its call
    assert _state(browser) == "halting"
    (work["marks"] / "go").touch()
    wait.until(lambda d: "view made" in _steps(d))
    assert work["proc"].wait(timeout=60) == 3
    shown = _steps(browser)
    order = [
        "stop pressed",
        "stop seen",
        "call ended",
        "saved",
        "released",
        "lane halted",
        "halted",
        "view made",  # the reviewable view is derived after the halt
    ]
    assert [s for s in shown if s in order] == order, shown
    assert browser.execute_script("return window.notReloaded === true;")
    assert _state(browser) == "halted"
    shot = tmp_path_factory.getbasetemp() / "board-stop-timeline.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The lane's work, as a diff from tether's own git of the lane.
    browser.find_element(By.LINK_TEXT, "1 commit(s)").click()
    assert "+one" in browser.find_element(By.TAG_NAME, "pre").text
