"""Headless Chromium for the tests of pages attnkit writes (the explorer, the docs site)."""

import shutil

import pytest


def chromium():
    """A headless Chromium driven by selenium; skips the test where either is missing."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install selenium)"
    )
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip(
            "headless Chromium is not installed (apt-get install chromium "
            "chromium-driver; `make install` does it as root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1600",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(options=options, service=Service(driver))


def page_errors(browser) -> list[str]:
    """The page's console errors."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def hover_heatmap(browser, x: int, y: int) -> str:
    """Hover the explorer's heat-map at ``(x, y)`` and return its tooltip's text.

    The heat-map is scrolled into the middle of the window first: WebDriver offsets are from
    the centre of an element's part in view, which is its own centre only when all of it is in
    view."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = browser.find_element("id", "heatmap")
    browser.execute_script(
        "arguments[0].scrollIntoView({block: 'center', inline: 'center'})", canvas
    )
    ActionChains(browser).move_to_element_with_offset(
        canvas, x - canvas.size["width"] // 2, y - canvas.size["height"] // 2
    ).perform()
    return browser.find_element("id", "tip").text
