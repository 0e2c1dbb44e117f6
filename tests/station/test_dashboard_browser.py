"""The dashboard in a real browser (Debian's chromium via Selenium) while the station flashes and
boot-checks virtual boards: the tiles go through their phases live, a failed board shows why,
the history finds the attempts and opens their qdl logs, and record text stays text."""

from __future__ import annotations

import threading
import time

import pytest

from provisioner import context
from provisioner.sim import control
from provisioner.station.dashboard import DashboardServer, DashboardSettings
from provisioner.station.flash import FlashOptions, flash_release
from provisioner.station.records import Records

from . import browser

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def chromium():
    why = browser.missing()
    if why:
        pytest.skip(why)
    drv = browser.start()
    yield drv
    drv.quit()


def _wait(drv, js: str, timeout_s: float = 60.0):
    """Poll a JS expression in the page until it is truthy (the page updates itself; no reloads)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = drv.execute_script("return " + js)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"page never showed: {js}")


def _subsequence(want: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(w in it for w in want)


def test_tiles_follow_a_boot_checked_flash_live_and_history_links_logs(station, release_8275, chromium, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("PROVISIONER_SIM_BOOT_SCALE", "0.3")
    monkeypatch.setenv("PROVISIONER_SIM_QDL_RATE_KBPS", "16384")   # flashing lasts long enough to be seen
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "oelinux123")
    good, bad = control.up(2, "iq-8275-evk", root=station.root, faults=("unreachable",)).boards
    try:
        bad.add_fault("edl-drop")
        cfg = station.config
        cfg.slots = {good.slot: "slot 1", bad.slot: "slot 2", "1-4.9": "slot 3"}   # slot 3 stays empty
        cfg.consoles = {good.serial: str(good.console_link), bad.serial: str(bad.console_link)}
        with DashboardServer(cfg, DashboardSettings(port=0)) as srv:
            chromium.get(srv.url)
            _wait(chromium, "document.querySelectorAll('.tile').length === 3 && "
                            "document.getElementById('link').textContent === 'live'")
            chromium.execute_script(browser.WATCH_TILES_JS)
            assert chromium.find_element("id", "tile-slot%203").get_attribute("data-phase") == "empty"
            runs = []

            def flash() -> None:
                with Records(cfg.database) as rec:
                    runs.append(flash_release(release_8275, cfg, context.current(), FlashOptions(
                        serials=(good.serial, bad.serial), boot_check=True, boot_timeout_s=60, retries=0,
                        edl_timeout_s=30), records=rec))

            th = threading.Thread(target=flash)
            th.start()
            try:
                _wait(chromium, "document.querySelector('.tile[data-phase=\"flashing\"] .bar')")
                chromium.save_screenshot(str(tmp_path / "dashboard-flashing.png"))
            finally:
                th.join(timeout=300)
            assert runs and not runs[0].ok and [r.ok for r in runs[0].results] == [True, False]
            _wait(chromium, "document.getElementById('tile-slot%201').dataset.phase === 'passed' && "
                            "document.getElementById('tile-slot%202').dataset.phase === 'failed'")
            chromium.save_screenshot(str(tmp_path / "dashboard-passed-failed.png"))
            phases = chromium.execute_script("return window.__phases")
            assert _subsequence(["empty", "flashing", "booting", "boot-check", "passed"], phases["slot 1"]), phases
            assert _subsequence(["empty", "flashing", "failed"], phases["slot 2"]), phases
            tile1 = chromium.find_element("id", "tile-slot%201").text
            tile2 = chromium.find_element("id", "tile-slot%202").text
            assert "PASSED" in tile1 and good.serial in tile1 and "gemma4-e2b-iq8275-2026.11" in tile1
            assert "FAILED" in tile2 and bad.serial in tile2 and runs[0].results[1].error.splitlines()[0][:40] in tile2

            # history: search by outcome, open the failed attempt's qdl log
            chromium.find_element("id", "nav-history").click()
            chromium.find_element("css selector", "select[name=result] option[value=failed]").click()
            chromium.find_element("css selector", "#search button").click()
            _wait(chromium, "document.querySelectorAll('#attempts tbody tr').length === 1")
            row = chromium.find_element("css selector", "#attempts tbody tr")
            assert bad.serial in row.text and "failed" in row.text
            assert "slot 2" in row.text        # sent to EDL from its console: its slot is recorded once found
            chromium.save_screenshot(str(tmp_path / "dashboard-history.png"))
            chromium.get(row.find_element("link text", "qdl log").get_attribute("href"))
            assert "# qdl log of attempt" in chromium.find_element("tag name", "body").text

            # untrusted text from boards and records is shown as text, never run or parsed
            hostile = '<img src=x onerror="window.__pwned=1"><b>bold</b>'
            with Records(cfg.database) as rec:
                aid = rec.start_attempt("0AA9FFFF", slot="slot 4<script>window.__pwned=1</script>", board=None,
                                        release_id=hostile, artifacts={}, qdl_version=None, log_path=None)
                rec.finish_attempt(aid, "failed", error=hostile)
            chromium.get(srv.url)
            _wait(chromium, "document.querySelectorAll('.tile').length === 4")
            assert chromium.execute_script("return document.querySelectorAll('#tiles img, #tiles b, #tiles script')"
                                           ".length") == 0
            assert hostile in chromium.find_element("id", "tiles").text
            chromium.get(srv.url + "#history")
            _wait(chromium, "document.querySelectorAll('#attempts tbody tr').length === 3")
            assert chromium.execute_script("return document.querySelectorAll('#attempts img, #attempts b').length"
                                           " + (window.__pwned || 0)") == 0
    finally:
        control.down(station.root)
    for name in ("dashboard-flashing.png", "dashboard-passed-failed.png", "dashboard-history.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
