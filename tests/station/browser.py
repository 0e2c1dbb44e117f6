"""Debian's chromium, headless, driven by Selenium through Debian's chromium-driver.

Both come from apt (``chromium chromium-driver``); nothing is downloaded at test time: the driver
path is given, so Selenium Manager never looks for one. Used by the dashboard's browser test and
by ``bench/station.py``.
"""

from __future__ import annotations

import shutil
from typing import Any

CHROMIUM = ("/usr/bin/chromium", "chromium")
DRIVER = ("/usr/bin/chromedriver", "chromedriver")


def _find(names: tuple[str, ...]) -> str | None:
    for n in names:
        found = shutil.which(n)
        if found:
            return found
    return None


def missing() -> str | None:
    """Why no browser can run here (one line), or None. selenium comes with the ``test`` extra, so its
    absence is no reason: importing it fails the tests instead of skipping them."""
    import selenium  # noqa: F401
    if not _find(CHROMIUM) or not _find(DRIVER):
        return "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    return None


def start(width: int = 1400, height: int = 860) -> Any:
    """A headless chromium session (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _find(CHROMIUM) or CHROMIUM[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-extensions", "--no-first-run", f"--window-size={width},{height}"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=_find(DRIVER) or DRIVER[0]), options=opts)


#: records every phase each tile shows, in order, into window.__phases (slot -> [phase, ...])
WATCH_TILES_JS = """
window.__phases = {};
window.__shown = [];
const note = (box) => {
  const slot = box.getAttribute('data-slot'), phase = box.getAttribute('data-phase');
  const seen = (window.__phases[slot] = window.__phases[slot] || []);
  if (seen[seen.length - 1] !== phase) seen.push(phase);
  window.__shown.push([parseFloat(box.getAttribute('data-ts')), Date.now() / 1000]);
};
document.querySelectorAll('.tile').forEach(note);
new MutationObserver((muts) => {
  for (const m of muts) if (m.target.classList && m.target.classList.contains('tile')) note(m.target);
}).observe(document.getElementById('tiles'), {attributes: true, subtree: true, childList: true,
                                              attributeFilter: ['data-ts']});
"""
