"""On a shared app (public link, Space) only the browser that started a run can stop it: headless Chromium with two
separate browsers (two Playwright contexts, each with its own local storage), and a reload in between.

Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import time

import pytest
from conftest import CHROMIUM, FLAGS, wait_for_no_live_run

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")


def _toast(page, text: str) -> None:
    page.get_by_text(text).first.wait_for(timeout=90_000)


def test_only_the_starting_browser_can_stop_its_run(runs_dir):
    import app
    from engine.training.jobs import JobManager

    demo = app.build_app(runs_dir, owner_only=True)
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **app.launch_options())
    jobs = JobManager(runs_dir)
    wait_for_no_live_run(runs_dir)
    try:
        with playwright_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            alice = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            bob = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            alice.goto(demo.local_url)
            alice.get_by_role("tab", name="Fine-tune").click()
            alice.get_by_text("only the browser that started a run can stop").first.wait_for(timeout=30_000)
            alice.locator("button.label-wrap").filter(has=alice.get_by_text("Run", exact=True)).click()  # the "Run" accordion: name the run
            name = alice.locator("#TrainConfig-run_name textarea")
            name.fill("owned-run")
            name.press("Tab")
            alice.get_by_text("Training", exact=True).first.click()  # a run long enough never to finish during the test
            steps = alice.locator("#TrainConfig-max_steps input")
            steps.fill("100000")
            steps.press("Tab")
            alice.get_by_role("button", name="Start training").click()
            _toast(alice, "Started run 'owned-run'")

            bob.goto(demo.local_url)  # opens while the run is going: it is shown to him, and he may watch it
            bob.get_by_role("tab", name="Fine-tune").click()
            bob.get_by_text("owned-run: running").first.wait_for(timeout=30_000)  # the page's load events have run
            bob.get_by_role("button", name="Stop (saves a checkpoint)").click()
            _toast(bob, "only that browser can stop it")
            assert jobs.active() == "owned-run"

            alice.reload()  # the key lives in the browser's local storage: a reload (or a closed tab) keeps it
            alice.get_by_role("tab", name="Fine-tune").click()
            # written by the page's load events (the run list alone is in the page from the start): by then the
            # browser's key has been read back from its local storage
            alice.get_by_text("owned-run: running").first.wait_for(timeout=30_000)
            alice.get_by_role("button", name="Stop (saves a checkpoint)").click()
            _toast(alice, "Asked 'owned-run' to stop")
            browser.close()
        deadline = time.time() + 180  # the run saves a checkpoint at its next step, then exits (slow on a loaded machine)
        while jobs.active() and time.time() < deadline:
            time.sleep(0.5)
        assert jobs.status("owned-run").state == "stopped"
    finally:
        if jobs.active():
            jobs.stop(jobs.active())
        demo.close()
