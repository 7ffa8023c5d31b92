"""A real server, the demo-like fleet, and Chromium driven by Playwright.

Any error in the browser's console, or an uncaught exception in a page,
fails the test that caused it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.servers import CHROMIUM, chromium

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
USER, PASSWORD = "operator", "a-long-console-password"

pytest.importorskip("playwright")
if not os.path.exists(CHROMIUM):
    pytest.skip("Chromium is not installed (make services)", allow_module_level=True)


@contextmanager
def chromium_beside_django() -> Iterator[Any]:
    """Chromium under Playwright, the database connections opened while it
    ran closed before it stops.

    Playwright's sync API keeps an event loop on this thread, and while it
    runs Django keeps this thread's connections apart from its plain ones
    (asgiref's thread-critical Local reads a running loop as an async
    context). A connection opened then is out of reach once the loop stops,
    and never goes back to the pool: each browser test left one checked
    out, until the placement race test after them found the pool short."""
    with chromium() as browser:
        try:
            yield browser
        finally:
            from django.db import connections

            connections.close_all()


@pytest.fixture(name="chromium")
def chromium_browser(site: str) -> Iterator[Any]:
    # Per test, and only once the server and fleet exist: Playwright's sync
    # API keeps an event loop on this thread, which Django's async guard
    # would take for an async context in every other test of the session.
    with chromium_beside_django() as browser:
        yield browser


@pytest.fixture
def site(asgi_server: str, settings: Any, tmp_path: Path) -> str:
    from django.contrib.auth.models import User

    from tests.console import fleet

    settings.DATA_DIR = tmp_path
    from llmgw.accounts import roles

    roles.grant(User.objects.create_user(USER, password=PASSWORD), roles.OPERATOR)
    fleet.build(asgi_server, tmp_path)
    return asgi_server


class Browser:
    """One logged-in page, collecting every console error."""

    def __init__(self, page: Any, url: str) -> None:
        self.page, self.url, self.errors, self.expected = page, url, [], []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

    def expect_error(self, text: str) -> None:
        """An error the test causes on purpose (a refused PATCH is a 409)."""
        self.expected.append(text)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(x in e for x in self.expected)]

    def login(self) -> None:
        self.page.goto(self.url + "/login/")
        self.page.fill("input[name=username]", USER)
        self.page.fill("input[name=password]", PASSWORD)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(self.url + "/")

    def open(self, path: str) -> Any:
        self.page.goto(self.url + path)
        return self.page

    def stream_open(self) -> None:
        """Wait until the page's console stream is open: its server joined
        the group before accepting, so a change committed from now on is
        pushed to the page. A change made before that reaches the page by
        its poll alone, which a test of the push cannot tell from a push
        that never came."""
        self.page.wait_for_selector("#live.on")

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@pytest.fixture
def browser(site: str, chromium: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    # The test's own ORM calls are plain synchronous code beside that loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    b = Browser(context.new_page(), site)
    b.login()
    yield b
    context.close()
    assert b.unexpected() == [], f"errors in the browser console: {b.unexpected()}"
