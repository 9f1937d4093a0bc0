"""Open a report.html in headless Chromium, check that it renders cleanly, save a screenshot.

    .venv/bin/python scripts/screenshot_report.py report/report.html docs/report-screenshot.png [1366x768]
    .venv/bin/python scripts/screenshot_report.py docs/results.json docs/report-screenshot.png 1366x768

A results file (``.json``) is rendered to a report first (``expattn.report.html.render_html``, in a temporary
folder), so the README's screenshot comes from the committed ``docs/results.json`` without re-running anything.
The screenshot records the count pills the page showed (``PILLS_KEY`` in the PNG's text metadata), so a test can
tell a stale screenshot from the current report.

The optional size is the page's viewport in CSS pixels (default 1280x1500), set exactly (a window of
that size would lose its toolbars' height).

Uses Debian's ``chromium`` and ``chromium-driver`` through selenium with the driver path set
explicitly (selenium then skips its driver manager: nothing is downloaded). Exit code 1 if the
page logs a console error, an image fails to load, or a dialog opens.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# The PNG text chunk that holds the page's count pills as shown (the text of ``header .pills``).
PILLS_KEY = "expattn-pills"
# Runs before the page's own code: counts dialogs instead of opening them.
DIALOG_TRAP = (
    "window.__dialogs = 0;for (const f of ['alert', 'confirm', 'prompt']) window[f] = () => { window.__dialogs++; };"
)


@dataclass
class PageCheck:
    """What the browser saw: console errors, each image's (alt, naturalWidth), dialogs, script tags."""

    console_errors: list[str]
    images: list[tuple[str, int]]
    dialogs: int
    script_tags: int
    title: str

    @property
    def ok(self) -> bool:
        return not self.console_errors and all(w > 0 for _, w in self.images) and not self.dialogs


def browser_paths() -> tuple[str, str] | None:
    """Paths of the chromium binary and of chromedriver, or None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def open_report(html_path: Path, size: tuple[int, int] = (1280, 1500)):
    """Load ``html_path`` and return ``(driver, user_data_dir)``; the caller quits the driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = browser_paths()
    if paths is None:
        raise FileNotFoundError("chromium and chromedriver are needed: apt-get install chromium chromium-driver")
    profile = tempfile.mkdtemp(prefix="expattn-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": DIALOG_TRAP})
    driver.get(Path(html_path).resolve().as_uri())
    return driver, profile


def check_page(driver) -> PageCheck:
    """Collect console errors, image load state, dialog count and script tags of the open page."""
    images = driver.execute_script(
        "return Array.from(document.images).map(i => [i.alt, i.complete ? i.naturalWidth : 0]);"
    )
    errors = [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    return PageCheck(
        console_errors=errors,
        images=[(alt, int(w)) for alt, w in images],
        dialogs=int(driver.execute_script("return window.__dialogs || 0;")),
        script_tags=int(driver.execute_script("return document.getElementsByTagName('script').length;")),
        title=driver.title,
    )


def set_viewport(driver, size: tuple[int, int]) -> None:
    """Make the page's viewport exactly ``size`` (width, height) CSS pixels at one device pixel each."""
    metrics = {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def inspect_report(html_path: Path, screenshot: Path | None = None, size: tuple[int, int] = (1280, 1500)) -> PageCheck:
    """Open, check and (optionally) screenshot a report with a ``size`` viewport; always closes the browser."""
    driver, profile = open_report(html_path, size)
    try:
        set_viewport(driver, size)
        check = check_page(driver)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(screenshot))
            pills = driver.execute_script(
                "const p = document.querySelector('header .pills'); return p ? p.innerText : '';"
            )
            _tag(screenshot, pills)
        return check
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _tag(png: Path, pills: str) -> None:
    """Write ``pills`` into ``png``'s text metadata under ``PILLS_KEY`` (the image itself unchanged)."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(PILLS_KEY, " ".join(pills.split()))
    with Image.open(png) as image:
        image.load()
        image.save(png, pnginfo=info)


def shown_pills(png: Path) -> str | None:
    """The count pills a screenshot recorded (``PILLS_KEY``), or None when it recorded none."""
    from PIL import Image

    with Image.open(png) as image:
        return image.text.get(PILLS_KEY)


def render_results(results: Path, folder: Path) -> Path:
    """``folder/report.html`` rendered from a results file (its plots read from the results file's folder)."""
    import json

    from expattn.report.html import render_html

    document = json.loads(results.read_text(encoding="utf-8"))
    html = folder / "report.html"
    html.write_text(render_html(document, results.resolve().parent), encoding="utf-8")
    return html


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: screenshot_report.py REPORT_HTML SCREENSHOT_PNG [WIDTHxHEIGHT]", file=sys.stderr)
        return 2
    size = tuple(int(n) for n in argv[2].split("x")) if len(argv) == 3 else (1280, 1500)
    source = Path(argv[0])
    with tempfile.TemporaryDirectory(prefix="expattn-screenshot-") as folder:
        page = render_results(source, Path(folder)) if source.suffix == ".json" else source
        check = inspect_report(page, Path(argv[1]), size)
    print(f"{check.title}: {len(check.images)} images, console errors {check.console_errors}, dialogs {check.dialogs}")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
