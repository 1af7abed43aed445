"""How long `perfgate dashboard` takes on a large results history, and how fast its pages load in a browser.

    python benchmarks/dashboard_pages.py --runs 10000 --cases 20 --classes 3
    python benchmarks/dashboard_pages.py --runs 240 --cases 4 --classes 2 --screenshots docs/images

fills a SQLite history with synthetic sessions (every case on every hardware class once per session, a 15 % step
in a third of the series halfway, two branches; every tenth session adds an A/B session of the first case, and each
stepped series a bisection that named the step's commit), times the site's build, then loads the overview, the
largest case page (and compares two of its commits there), a run page and the A/B sessions' page in headless
Chromium (Debian's chromium and chromium-driver) and prints each page's load time (the browser's own navigation
timing). ``--screenshots DIR`` also saves the pages as PNGs, as the docs show them. Budgets (issue 49): the build in
30 s, each page in 2 s, on the 2-core VM.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fakes import record  # noqa: E402

from perfgate.dashboard.markup import slug  # noqa: E402
from perfgate.dashboard.site import build  # noqa: E402
from perfgate.measure import stats  # noqa: E402
from perfgate.result import Result  # noqa: E402
from perfgate.trend.database import Bisection, Context, ResultsDatabase  # noqa: E402

WALL, CPU = "fastest_step_samples_per_second", "cpu_seconds_per_sample"


def fill(url: str, runs: int, cases: int, classes: int, seed: int) -> None:
    """Sessions of every case on every class until ``runs`` results are kept."""
    rng = random.Random(seed)
    names = [f"case{c:02d}-fp32-cpu" for c in range(cases)]
    hardware = [f"cpu-class{h}-2c-n1" for h in range(classes)]
    sessions = runs // (cases * classes)
    database = ResultsDatabase(url)
    previous = ""
    try:
        for number in range(sessions):
            commit = f"{rng.getrandbits(160):040x}"
            results = []
            for c, case in enumerate(names):
                for h, hardware_class in enumerate(hardware):
                    stepped = (c + h) % 3 == 0 and number >= sessions // 2
                    wall = 100.0 * (1 + 0.3 * h) * (0.85 if stepped else 1.0) * rng.gauss(1.0, 0.01)
                    verdict = "FAIL" if stepped and number == sessions // 2 else "pass"
                    results.append(record(case, hardware_class=hardware_class, verdict=verdict, measured={
                        WALL: wall, CPU: 0.01 / (wall / 100.0), "probe_matmul_gflops": rng.gauss(100.0, 2.0)},
                        metrics=[{"metric": WALL, "unit": "samples/s", "measured": wall, "baseline": 100.0,
                                  "change": wall / 100.0 - 1, "tolerance": 0.06, "verdict": verdict},
                                 {"metric": CPU, "unit": "CPU s/sample", "measured": 0.01, "baseline": 0.01,
                                  "change": 0.0, "tolerance": 0.05, "verdict": "pass"}],
                        per_run=[{"run": 0, "time_s": {"startup_s": 6.0, "warmup_s": 2.0, "window_s": 8.0,
                                                       "after_window_s": 0.5, "teardown_s": 1.0, "total_s": 17.5}}]))
            if number % 10 == 9:
                results.append(ab_session(names[0], hardware[0], commit, previous, rng))
            database.record(results, Context(session=f"s{number}", commit=commit,
                                             branch="main" if number % 4 else "feature", launcher="local", nodes=1,
                                             environment={"torch": "2.14.1", "python": "3.11.7"}))
            if number == sessions // 2:
                for c, case in enumerate(names):
                    for h, hardware_class in enumerate(hardware):
                        if (c + h) % 3 == 0:
                            database.record_bisection(Bisection(case, hardware_class, previous, commit, commit,
                                                                [commit], f"{case}: first bad commit {commit}"))
            previous = commit
    finally:
        database.close()


def ab_session(case: str, hardware_class: str, commit: str, previous: str, rng: random.Random) -> Result:
    """Five duet pairs of the commit against the one before, within a percent of each other."""
    reference = [100.0 * rng.gauss(1.0, 0.01) for _ in range(5)]
    candidate = [value * rng.gauss(1.0, 0.005) for value in reference]
    compared = stats.compare_pairs(reference, candidate)
    return record(case, hardware_class=hardware_class, verdict="pass", candidate_commit=commit,
                  reference={"revision": "HEAD~1", "commit": previous, "per_run": [{}] * 5},
                  measured={WALL: statistics.median(candidate)},
                  metrics=[{"metric": WALL, "unit": "samples/s", "measured": statistics.median(candidate),
                            "baseline": statistics.median(reference), "change": compared.change,
                            "ci": [compared.ci_low, compared.ci_high], "verdict": "pass", "run_values": candidate,
                            "baseline_runs": reference}])


def load_times(site: Path, pages: list[str], screenshots: Path | None) -> dict[str, float]:
    """Each page's load time in headless Chromium, from its navigation timing (seconds)."""
    from selenium import webdriver
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))
    found = {}
    try:
        for page in pages:
            driver.get((site / page).as_uri())
            # Selenium returns once the document is complete, which is just before the load event has ended.
            found[page] = WebDriverWait(driver, 30).until(lambda d: d.execute_script(
                "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd / 1000;"))
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(screenshots / f"dashboard-{page.split('/')[0].removesuffix('.html')}.png"))
            if page.startswith("case/"):
                found["comparing two other commits there"] = driver.execute_script(
                    "const b = document.querySelector('select[data-compare=b]'); const began = performance.now();"
                    "b.selectedIndex = 0; b.dispatchEvent(new Event('change'));"
                    "return (performance.now() - began) / 1000;")
    finally:
        driver.quit()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument("--screenshots", type=Path, help="save the pages' screenshots here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfgate-dashboard-") as scratch:
        url, out = str(Path(scratch) / "history.db"), Path(scratch) / "site"
        began = time.perf_counter()
        fill(url, args.runs, args.cases, args.classes, args.seed)
        print(f"filled {args.runs} runs in {time.perf_counter() - began:.1f} s")
        began = time.perf_counter()
        pages = build(url, out)
        print(f"built {len(pages)} pages in {time.perf_counter() - began:.1f} s "
              f"({sum(p.stat().st_size for p in out.rglob('*')) / 2**20:.0f} MiB)")
        first_run = min(int(p.stem) for p in (out / "run").glob("*.html"))
        shown = ["index.html", f"case/{slug('case00-fp32-cpu', 'cpu-class0-2c-n1')}.html", f"run/{first_run}.html",
                 "ab.html"]
        for page, seconds in load_times(out, shown, args.screenshots).items():
            print(f"{page}: {seconds * 1000:,.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
