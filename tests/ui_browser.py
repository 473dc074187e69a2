"""A headless browser for the Kubeflow UI tests: PyPI's Playwright driving Debian's Chromium (no browser download).

`page()` opens one; `skip_reason()` says why none can run here (no playwright, no chromium).
`screenshot()` writes a picture under docs/images/ui/ when KUBETRAIN_UPDATE_GOLDEN=1 (the README's
pictures come from the browser tests, as `make golden` refreshes the golden files) and under the
test's tmp dir otherwise. `colored_fraction()` measures a screenshot's pixels (the report's chart).
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # playwright is imported when a page opens: its absence is a skip reason
    from playwright.sync_api import ViewportSize

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS_IMAGES = REPO_ROOT / "docs" / "images" / "ui"
# The wrapper /usr/bin/chromium prints a shell warning and adds flags; the binary behind it is enough.
CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")
VIEWPORT: ViewportSize = {"width": 1440, "height": 900}


def chromium() -> str | None:
    """Chromium's executable: KUBETRAIN_CHROMIUM, else Debian's package."""
    wanted = os.environ.get("KUBETRAIN_CHROMIUM")
    if wanted:
        return wanted if os.access(wanted, os.X_OK) else None
    return next((c for c in CANDIDATES if os.access(c, os.X_OK)), shutil.which("chromium"))


def skip_reason() -> str | None:
    """Why no browser test can run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium() is None:
        return "no Chromium: apt-get install chromium (or set KUBETRAIN_CHROMIUM)"
    return None


@contextmanager
def page(*, timeout_ms: float = 30_000) -> Iterator[Any]:
    """A fresh page of a headless Chromium; closed, with its browser, on exit."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    assert executable is not None, skip_reason()
    with sync_playwright() as pw:
        # No sandbox: CI runs as root, where Chromium refuses its own; /dev/shm is small in containers.
        browser = pw.chromium.launch(executable_path=executable, headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])  # fmt: skip
        try:
            context = browser.new_context(viewport=VIEWPORT)
            opened = context.new_page()
            opened.set_default_timeout(timeout_ms)
            yield opened
        finally:
            browser.close()


def updating() -> bool:
    """Whether this run refreshes the docs' pictures (KUBETRAIN_UPDATE_GOLDEN=1)."""
    return os.environ.get("KUBETRAIN_UPDATE_GOLDEN") == "1"


def screenshot(target: Any, name: str, tmp_dir: Path) -> bytes:
    """A PNG of `target` (a page or a locator): docs/images/ui/<name>.png when refreshing, else in tmp_dir."""
    folder = DOCS_IMAGES if updating() else tmp_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    data: bytes = target.screenshot(path=str(path))
    return data


def colored_fraction(png: bytes, is_colored: Callable[[tuple[int, int, int]], bool]) -> float:
    """The share of a PNG's pixels for which `is_colored((r, g, b))` holds."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        pixels = list(image.convert("RGB").getdata())
    return sum(1 for p in pixels if is_colored(p)) / max(len(pixels), 1)


def near(color: int, tolerance: int = 40) -> Callable[[tuple[int, int, int]], bool]:
    """A pixel test: within `tolerance` of the RGB `color` (0xRRGGBB) on each channel (anti-aliasing blends edges)."""
    want = ((color >> 16) & 0xFF, (color >> 8) & 0xFF, color & 0xFF)
    return lambda rgb: all(abs(a - b) <= tolerance for a, b in zip(rgb, want, strict=True))


# The report's curves (kubetrain.kfp_runtime.report.curves_svg): loss in tab:blue, accuracy in tab:green.
LOSS_BLUE = near(0x1F77B4)
ACCURACY_GREEN = near(0x2CA02C)
