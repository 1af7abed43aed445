"""``perfgate dashboard``: the site written from a results database the test fills, its exports, its refusals, and the
pages driven in a real browser (Debian's chromium through Selenium), from file:// with no network."""

from __future__ import annotations

import datetime
import html
import json
import math
import os
import shutil
import statistics
import tempfile

import pytest
from fakes import record

from conftest import skip_without_server

pytest.importorskip("plotly", reason="perfgate dashboard needs plotly (perfgate[dashboard], requirements.txt)")
pytest.importorskip("otava.analysis", reason="perfgate dashboard reads the history through perfgate[trend]")

from perfgate.cli import main as perfgate  # noqa: E402
from perfgate.dashboard.site import detection_power  # noqa: E402
from perfgate.trend.database import Bisection, Context, ResultsDatabase  # noqa: E402

WALL = "fastest_step_samples_per_second"
COMMIT_URL = "https://git.example/perfgate/commit/{sha}"


def session(database, commit, branch, results, torch="2.14.1"):
    database.record(results, Context(session=commit, commit=commit, branch=branch, launcher="local", nodes=1,
                                     environment={"torch": torch, "python": "3.11.7"}))


HIDDEN = ("clip-cpu: a planted slowdown of 25% should move samples_per_second by -20.0%, but it moved -1.0% against "
          "b/cpu-2c/clip-cpu.json: the plant did not take; this verdict proves nothing about the gate")


def result(case, hardware_class, value, verdict="pass", message=None, warned=()):
    return record(case, hardware_class=hardware_class, verdict=verdict, message=message, warnings=list(warned),
                  measured={WALL: value, "cpu_seconds_per_sample": 0.01, "probe_matmul_gflops": 100.0},
                  gpu={"samples": 10, "mean_utilization": 0.9 * value / 100.0},
                  command="python -m torch.distributed.run --nproc-per-node 2 clip.py --records $WORKDIR/steps.jsonl",
                  metrics=[{"metric": WALL, "unit": "samples/s", "measured": value, "baseline": 100.0,
                            "change": value / 100.0 - 1, "tolerance": 0.06, "verdict": verdict}])


def sha(index):
    return f"c{index}" + "0" * 38


REFERENCE, CANDIDATE = [100.0, 101.0, 99.0, 100.0], [80.0, 81.0, 79.5, 80.5]


def ab_result():
    """An A/B session of c11 against c7: four pairs, each about 20 % slower."""
    return record("clip-cpu", hardware_class="cpu-2c", verdict="FAIL", candidate_commit=sha(11),
                  reference={"revision": "c7", "commit": sha(7), "per_run": [{}] * 4},
                  measured={WALL: 80.25}, metrics=[{"metric": WALL, "unit": "samples/s", "measured": 80.25,
                                                    "baseline": 100.0, "change": -0.1975, "ci": [-0.21, -0.185],
                                                    "verdict": "FAIL", "run_values": CANDIDATE,
                                                    "baseline_runs": REFERENCE}])


def fill(url):
    """Twelve sessions of a case on main, 20 % slower from the ninth (commit c8, which also brought a newer torch),
    an A/B session and a bisection of that step, and one steady case on a branch."""
    database = ResultsDatabase(url)
    for index in range(12):
        slower = index >= 8
        value = (80.0 if slower else 100.0) + (index % 3 - 1) * 0.5
        session(database, sha(index), "main",
                [result("clip-cpu", "cpu-2c", value, "FAIL" if slower else "pass",
                        "clip-cpu: performance regression" if slower else None,
                        [{"category": "PlantNotTakenWarning", "message": HIDDEN}] if index == 0 else ())],
                "2.15.0" if slower else "2.14.1")
        session(database, f"f{index}" + "0" * 38, "feature", [result("unet-cpu", "cpu-4c", 50.0 + index % 2)])
    session(database, sha(11), "main", [ab_result()], "2.15.0")
    database.record_bisection(Bisection("clip-cpu", "cpu-2c", sha(7), sha(11), sha(8), [sha(8)],
                                        f"clip-cpu: first bad commit {sha(8)}"))
    database.close()
    return url


@pytest.fixture
def history(tmp_path):
    return fill(str(tmp_path / "history.db"))


@pytest.fixture
def site(history, tmp_path):
    out = tmp_path / "site"
    assert perfgate(["dashboard", "--history", history, "--out", str(out), "--commit-url", COMMIT_URL]) == 0
    return out


def test_the_overview_lists_each_series_with_its_newest_change_and_exports_what_it_shows(site):
    rows = {row["case"]: row for row in json.loads((site / "index.json").read_text())}
    assert set(rows) == {"clip-cpu", "unet-cpu"}
    clip = rows["clip-cpu"]
    assert (clip["hardware_class"], clip["metric"], clip["results"], clip["branches"]) == ("cpu-2c", WALL, 12, "main")
    assert clip["newest_change"] == pytest.approx(-0.2, abs=0.01) and clip["since_commit"].startswith("c8")
    assert clip["latest_verdict"] == "FAIL" and rows["unet-cpu"]["newest_change"] is None
    assert (site / "index.csv").read_text().splitlines()[0].startswith("case,hardware_class,metric")
    overview = (site / "index.html").read_text()
    assert 'href="https://git.example/perfgate/commit/c8' in overview


def test_a_case_page_and_each_run_page_say_what_the_record_holds(site):
    case = site / "case" / "clip-cpu--cpu-2c.html"
    rows = [row for row in json.loads(case.with_suffix(".json").read_text()) if row["metric"] == WALL]
    assert [row["result"] for row in rows] == list(range(1, 13))
    assert rows[8]["verdict"] == "FAIL" and rows[8]["run"].startswith("../run/")
    run = (case.parent / rows[8]["run"]).resolve()
    text = run.read_text()
    assert "clip-cpu: performance regression" in text and "verdict-FAIL" in text
    assert "<code>python -m torch.distributed.run --nproc-per-node 2 clip.py --records $WORKDIR/steps.jsonl</code>" \
        in text, "the exact command"
    assert json.loads(run.with_suffix(".json").read_text())["schema_version"] >= 2
    passed = (case.parent / rows[0]["run"]).resolve().read_text()
    assert f"<h2>PlantNotTakenWarning</h2><pre>{html.escape(HIDDEN)}</pre>" in passed, \
        "a pass says what it proves nothing about"
    assert "PlantNotTakenWarning" not in text


def test_a_case_page_draws_its_cpu_clock_and_gpu_busy_beside_its_gated_metrics_and_compares_them_too(site):
    text = (site / "case" / "clip-cpu--cpu-2c.html").read_text()
    assert [f'id="history-{i}"' in text for i in range(4)] == [True, True, True, False]
    titles = text.partition('id="history-0"')[2]
    assert titles.index(WALL) < titles.index("cpu_seconds_per_sample") < titles.index("gpu_busy_fraction")
    assert "probe_matmul_gflops" not in titles, "the probe reads the machine, not the case"
    data = json.loads(text.split('id="compare-data">')[1].split("</script>")[0])
    assert set(data["metrics"]) == {WALL, "cpu_seconds_per_sample", "gpu_busy_fraction"}
    assert data["metrics"]["cpu_seconds_per_sample"]["sigma"] is None, "every session read 0.01: no noise to judge by"
    assert [c["sha"] for c in data["commits"]] == [sha(i) for i in range(12)]


def test_a_change_point_says_what_changed_in_the_environment_and_the_case_says_what_its_plants_caught(site):
    text = (site / "case" / "clip-cpu--cpu-2c.html").read_text()
    assert "torch 2.14.1 &rarr; 2.15.0" in text and "python" not in text.split("At each change point")[1][:200]
    assert "no planted slowdown in the history" in text
    run = (site / "run" / "17.html").read_text()
    assert "2.15.0" in run, "the run page shows the environment the database kept"


def test_detection_power_counts_each_planted_size_and_names_the_smallest_caught():
    plants = [record(injected_slowdown=size, verdict=verdict) for size, verdict in (
        (0.05, "pass"), (0.05, "FAIL"), (0.1, "FAIL"), (0.1, "FAIL"), (0.02, "unresolved"), (0.1, "crashed"))]
    power = detection_power(plants + [record(verdict="FAIL")])
    assert power.planted == {0.02: (0, 1), 0.05: (1, 2), 0.1: (2, 2)} and power.smallest_caught == 0.05
    assert power.describe() == "planted slowdowns: 2%: 0 of 1 failed, 5%: 1 of 2 failed, 10%: 2 of 2 failed; " \
                               "the smallest caught 5%"


def test_the_site_loads_nothing_from_the_network(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) == 2 + 2 + 25, "the overview, the A/B sessions, a page per case and one per run"
    for path in pages:
        text = path.read_text()
        assert "<script src=\"http" not in text and "cdn" not in text.lower(), path
    assert (site / "assets" / "plotly.min.js").stat().st_size > 1_000_000


@pytest.mark.launches
def test_a_site_built_from_postgresql_is_the_one_built_from_sqlite(site, postgres, tmp_path):
    out = tmp_path / "from-postgres"
    assert perfgate(["dashboard", "--history", fill(postgres.new_database("dashboard")), "--out", str(out),
                     "--commit-url", COMMIT_URL]) == 0
    files = sorted(str(path.relative_to(site)) for path in site.rglob("*") if path.is_file())
    assert files == sorted(str(path.relative_to(out)) for path in out.rglob("*") if path.is_file())
    for name in files:
        if name.endswith(".json"):
            ours, theirs = (json.loads((root / name).read_text()) for root in (site, out))
            if isinstance(ours, list):
                ours, theirs = ([{k: v for k, v in row.items() if k != "recorded_at"} for row in rows]
                                for rows in (ours, theirs))
            assert ours == theirs, name


def test_a_missing_database_and_a_commit_url_without_a_place_for_the_commit_are_refused(tmp_path, capsys):
    assert perfgate(["dashboard", "--history", str(tmp_path / "none.db"), "--out", str(tmp_path / "s")]) == 2
    assert "perfgate: error:" in capsys.readouterr().err
    assert perfgate(["dashboard", "--history", "h.db", "--out", "s", "--commit-url", "https://x/commit/"]) == 2
    assert "--commit-url needs {sha}" in capsys.readouterr().err


CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser():
    """Headless chromium, driven through its own chromedriver: nothing is downloaded (Selenium Manager is not asked).
    Its TMPDIR is a short one of its own, removed after it quits: chromium leaves its singleton directory behind in
    the temp dir, and its socket's path must stay under the 107 bytes a Unix socket allows (a test's tmp_path under
    xdist is too long)."""
    skip_without_server(None if CHROMIUM and CHROMEDRIVER else
                        "no chromium and chromium-driver here (Debian packages; .ci/run installs them)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="the browser tests need selenium (requirements.txt)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--allow-file-access-from-files"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with tempfile.TemporaryDirectory(prefix="perfgate-chromium-", ignore_cleanup_errors=True) as own_tmp:
        service = webdriver.ChromeService(executable_path=CHROMEDRIVER, env={**os.environ, "TMPDIR": own_tmp})
        driver = webdriver.Chrome(options=options, service=service)
        driver.implicitly_wait(10)
        yield driver
        driver.quit()


def console_errors(driver):
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def shown_cases(driver):
    from selenium.webdriver.common.by import By

    return sorted(row.find_element(By.CSS_SELECTOR, "td a").text
                  for row in driver.find_elements(By.CSS_SELECTOR, "tbody tr") if row.is_displayed())


@pytest.mark.launches
def test_in_a_browser_the_filters_live_in_the_url_and_a_link_shows_what_its_sender_saw(site, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    index = (site / "index.html").as_uri()
    browser.get(index)
    assert shown_cases(browser) == ["clip-cpu", "unet-cpu"]
    assert len(browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) == 2, "a sparkline per series"
    Select(browser.find_element(By.NAME, "branch")).select_by_value("feature")
    assert shown_cases(browser) == ["unet-cpu"] and browser.current_url.endswith("?branch=feature")
    browser.get(index + "?hardware-class=cpu-2c")
    assert shown_cases(browser) == ["clip-cpu"]
    assert Select(browser.find_element(By.NAME, "hardware-class")).first_selected_option.text == "cpu-2c"
    assert console_errors(browser) == []


@pytest.mark.launches
def test_in_a_browser_a_case_chart_marks_its_change_point_and_a_point_opens_its_run(site, browser):
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    browser.find_element(By.LINK_TEXT, "clip-cpu").click()
    assert browser.title == "clip-cpu on cpu-2c"
    plot = browser.find_element(By.CSS_SELECTOR, "#history-0.js-plotly-plot")
    points = plot.find_elements(By.CSS_SELECTOR, ".scatterlayer .point")
    assert len(points) == 12
    assert any("c8" in text.text for text in plot.find_elements(By.CSS_SELECTOR, ".annotation-text"))
    browser.execute_script("arguments[0].emit('plotly_click', {points: [arguments[0].data[0] && "
                           "{customdata: arguments[0].data[0].customdata[8]}]})", plot)
    assert browser.title == "clip-cpu on cpu-2c: run 17"
    assert "clip-cpu: performance regression" in browser.find_element(By.TAG_NAME, "pre").text
    assert console_errors(browser) == []


def drawn_share(png):
    """The share of a screenshot's pixels that are not the page's white background."""
    image = pytest.importorskip("matplotlib.image", reason="reading a screenshot needs matplotlib").imread(png)
    return float((image[..., :3].min(axis=2) < 0.9).mean())


@pytest.mark.launches
def test_a_screenshot_of_each_main_page_shows_its_table_and_charts(site, browser, tmp_path):
    browser.set_window_size(1200, 900)
    for page in ("index.html", "case/clip-cpu--cpu-2c.html", "run/17.html"):
        browser.get((site / page).as_uri())
        png = tmp_path / f"{page.replace('/', '-')}.png"
        assert browser.save_screenshot(str(png))
        assert drawn_share(png) > 0.02, f"{page}: the screenshot is blank"
    blank = tmp_path / "blank.png"
    browser.get("about:blank")
    browser.save_screenshot(str(blank))
    assert drawn_share(blank) < 0.001


def test_exports_keep_a_dotted_case_id_whole_and_only_a_real_commit_is_linked(tmp_path):
    from perfgate.dashboard.markup import Site, export

    links = export(tmp_path / "x-lr0.1-cpu--cpu-2c", ("case",), [{"case": "x-lr0.1-cpu"}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x-lr0.1-cpu--cpu-2c.csv", "x-lr0.1-cpu--cpu-2c.json"]
    assert 'href="x-lr0.1-cpu--cpu-2c.csv"' in links
    site = Site(tmp_path, COMMIT_URL)
    assert site.commit_link("0123abc-dirty") == "https://git.example/perfgate/commit/0123abc"
    assert (site.commit_link("unknown"), site.commit_link(None), Site(tmp_path).commit_link("0123abc")) == (
        None, None, None)


def test_the_a_b_page_gives_each_session_its_change_and_interval_and_its_run_page_the_pairs(site):
    (row,) = json.loads((site / "ab.json").read_text())
    assert (row["case"], row["candidate"], row["reference"], row["pairs"]) == ("clip-cpu", sha(11), sha(7), 4)
    assert (row["change"], row["ci_low"], row["ci_high"], row["verdict"]) == (-0.1975, -0.21, -0.185, "FAIL")
    assert f'href="run/{row["run"]}.html#pairs"' in (site / "ab.html").read_text()
    pairs = json.loads((site / "run" / f"{row['run']}-pairs.json").read_text())
    assert [(p["reference"], p["candidate"]) for p in pairs] == list(zip(REFERENCE, CANDIDATE))
    assert pairs[0]["ratio"] == pytest.approx(-0.2)
    text = (site / "run" / f"{row['run']}.html").read_text()
    assert "-19.8% [-21.0%..-18.5%]" in text and "c7 (<a class=\"commit\"" in text
    assert "Where each launch" not in text, "a record without a time account has no empty table"
    assert "Where each launch" not in (site / "run" / "1.html").read_text()


def test_a_bisection_is_shown_at_the_change_point_it_explains_and_on_its_case(site):
    text = (site / "case" / "clip-cpu--cpu-2c.html").read_text()
    at_the_step = text.split("At each change point")[1].split("</li>")[0]
    assert f'perfgate bisect between <a class="commit" href="https://git.example/perfgate/commit/{sha(7)}"' in at_the_step
    assert f'named <a class="commit" href="https://git.example/perfgate/commit/{sha(8)}">' in at_the_step
    assert text.count('class="bisection"') == 1
    assert "Bisections" not in (site / "case" / "unet-cpu--cpu-4c.html").read_text()


def test_the_noise_between_two_commits_is_the_pooled_spread_around_each_segment():
    from perfgate.dashboard import compare
    from perfgate.trend.analysis import series
    from perfgate.trend.database import Point

    when = datetime.datetime(2026, 11, 28, tzinfo=datetime.timezone.utc)
    values = [100.0, 102.0, 98.0, 101.0, 99.0]
    (one,) = series([Point(i, when, "c", "hw", WALL, v, sha(i), "pass", True, "1") for i, v in enumerate(values)])
    found = compare.noise(one)
    assert found.degrees_of_freedom == 4
    assert found.sigma == pytest.approx(statistics.stdev(math.log(v) for v in values))
    assert found.t == pytest.approx(2.776, abs=1e-3), "Student's t, 95 %, 4 degrees of freedom"
    fast, slow = [100.0, 104.0, 96.0, 100.0, 102.0, 98.0] * 2, [70.0, 71.0, 69.0] * 4
    (stepped,) = series([Point(i, when, "c", "hw", WALL, v, sha(i), "pass", True, "1")
                         for i, v in enumerate(fast + slow)])
    assert [c.index for c in stepped.changes] == [12]
    pooled = compare.noise(stepped)
    squares = sum((math.log(v) - statistics.fmean(math.log(u) for u in part)) ** 2
                  for part in (fast, slow) for v in part)
    assert pooled.degrees_of_freedom == 22 and pooled.sigma == pytest.approx(math.sqrt(squares / 22)), \
        "each value against its own segment's mean: the step is not noise"

    def alone(*values):
        (one,) = series([Point(i, when, "c", "hw", WALL, v, sha(i), "pass", True, "1") for i, v in enumerate(values)])
        return compare.noise(one)
    assert alone(100.0) is None and alone(100.0, 100.0, 100.0) is None, "no spread to judge by"
    assert alone(100.0, math.inf, 99.0) is None and alone(100.0, 0.0, 99.0) is None


def compared(driver):
    from selenium.webdriver.common.by import By

    return {row.get_attribute("data-compared-metric"): [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in driver.find_elements(By.CSS_SELECTOR, "table.compared tbody tr")}


@pytest.mark.launches
def test_in_a_browser_any_two_commits_compare_against_the_history_noise_and_live_in_the_url(site, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from perfgate.dashboard import compare
    from perfgate.trend.analysis import series

    database = ResultsDatabase(str(site.parent / "history.db"), create=False)
    (clip,) = series([p for p in database.points(["clip-cpu"]) if p.gated and p.result_id != 25])
    database.close()
    noise = compare.noise(clip)

    def expected(a, b):
        shift = math.log(clip.points[b].value / clip.points[a].value)
        half = noise.t * noise.sigma * math.sqrt(2)
        return [f"{math.exp(x) - 1:+.1%}" for x in (shift, shift - half, shift + half)]

    page = (site / "case" / "clip-cpu--cpu-2c.html").as_uri()
    browser.get(page)
    assert Select(browser.find_element(By.NAME, "a")).first_selected_option.get_attribute("value") == sha(7)
    assert Select(browser.find_element(By.NAME, "b")).first_selected_option.get_attribute("value") == sha(8)
    change, low, high = expected(7, 8)
    assert compared(browser)[WALL] == [WALL, "1 session(s)", "1 session(s)", change, f"{low}..{high}", "worse"]
    Select(browser.find_element(By.NAME, "b")).select_by_value(sha(3))
    assert browser.current_url.endswith(f"?b={sha(3)}")
    change, low, high = expected(7, 3)
    assert compared(browser)[WALL][3:] == [change, f"{low}..{high}", "within the noise"]
    browser.get(f"{page}?a={sha(9)}&b={sha(2)}")
    assert compared(browser)[WALL][5] == "better", "from the slow commit back to a fast one"
    browser.get(f"{page}?a=deadbeef&b={sha(3)[:10]}")
    assert Select(browser.find_element(By.NAME, "a")).first_selected_option.get_attribute("value") == sha(7), \
        "a commit the case does not have falls back to the default, and leaves the URL"
    assert Select(browser.find_element(By.NAME, "b")).first_selected_option.get_attribute("value") == sha(3), \
        "a short SHA finds its commit"
    assert "a=" not in browser.current_url and f"b={sha(3)[:10]}" in browser.current_url
    assert console_errors(browser) == []


@pytest.mark.launches
def test_in_a_browser_an_a_b_session_shows_its_pairs_around_the_change_and_its_interval(site, browser):
    from selenium.webdriver.common.by import By

    browser.get((site / "ab.html").as_uri())
    browser.find_element(By.PARTIAL_LINK_TEXT, "25").click()
    assert browser.title == "clip-cpu on cpu-2c: run 25"
    plot = browser.find_element(By.CSS_SELECTOR, "#pairs-0.js-plotly-plot")
    assert len(plot.find_elements(By.CSS_SELECTOR, ".scatterlayer .point")) == 4
    assert any("-19.8%" in text.text for text in plot.find_elements(By.CSS_SELECTOR, ".annotation-text"))
    assert len(plot.find_elements(By.CSS_SELECTOR, ".shapelayer path")) >= 2, "the interval's band and zero"
    assert console_errors(browser) == []
