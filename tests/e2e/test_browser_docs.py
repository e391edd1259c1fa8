"""The OpenAPI page renders in Chromium with every request kept on the server itself (no CDN)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_swagger_ui_renders_offline(live_server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    host = urlparse(live_server).netloc
    outside: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        # Refuse anything not served by gpulab: the page must not need the internet.
        def guard(route: Any) -> None:
            url = route.request.url
            if urlparse(url).netloc == host or url.startswith("data:"):
                route.continue_()
            else:
                outside.append(url)
                route.abort()

        page.route("**/*", guard)
        page.goto(f"{live_server}/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("OAS 3.1", timeout=30_000)
        expect(page.locator(".opblock-summary-path", has_text="/api/auth/login").first).to_be_visible()
        assert outside == []
    finally:
        page.close()
