"""Live-stack fixtures for web-app tests: real workers, a real daphne, a real browser.

Documented in tests/support/__init__.py. Everything here is session-scoped except the page, so
the stack starts once per test run (a few seconds) and is stopped, process group and all, at
the end.
"""

from __future__ import annotations

import os

import pytest

from tests.support.browser import launch_chromium
from tests.support.stack import database_url, stack_env, start_asgi_server, start_worker, wait_for_workers

QUEUES = ("agent", "compile", "gpu")


@pytest.fixture(autouse=True)
def operator_view_for_everyone(settings):
    """Django's test setup adds "testserver" to ALLOWED_HOSTS, which turns the operator view's
    "auto" to staff-only; in-process tests see it as one person's machine does (the launcher's
    own stacks run with "auto"). tests/webapp/test_operator_view.py sets "auto" itself."""
    settings.KERNELWRIGHT_OPERATOR_VIEW = "everyone"


@pytest.fixture(scope="session")
def live_stack_env(redis_url: str, django_db_setup, django_db_blocker) -> dict[str, str]:
    from django.db import connection

    return stack_env(database_url(connection.settings_dict), redis_url)


@pytest.fixture(scope="session")
def live_workers(live_stack_env, redis_url, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("workers")
    workers = {}
    try:
        for queue in QUEUES:
            workers[queue] = start_worker(queue, live_stack_env, log_dir)
        wait_for_workers(workers, redis_url)
        yield workers
    finally:
        for proc in workers.values():
            proc.stop()


@pytest.fixture(scope="session")
def live_asgi_server(live_stack_env, live_workers, tmp_path_factory):
    env = live_stack_env | {
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # configured, never called by these tests
        "OPENAI_API_KEY": "sk-test-key-that-must-never-be-shown",
        "KERNELWRIGHT_BACKEND": "auto",
    }
    server = start_asgi_server(env, tmp_path_factory.mktemp("daphne"))
    try:
        yield server
    finally:
        server.process.stop()


@pytest.fixture
def chromium_browser():
    """Function-scoped on purpose: Playwright's sync API leaves an asyncio loop marked running in
    this thread while it is alive, and async_to_sync (Channels, layer calls) refuses to run then.
    A browser per test (about a second) keeps every other test free of that loop."""
    from playwright.sync_api import sync_playwright

    # With that loop running, Django also refuses ORM calls from test code
    # ("SynchronousOnlyOperation"); test code is synchronous, so allow them while the browser lives.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def browser_page(chromium_browser):
    context = chromium_browser.new_context(viewport={"width": 1100, "height": 700})
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(autouse=True)
def fast_passwords(request):
    """One PBKDF2 hash costs over a second on a 2-core machine and these tests create many users.
    Tests against a live server (marked e2e) keep the real hasher: the server process runs the
    real settings and must be able to check the passwords the test stored."""
    if not request.node.get_closest_marker("e2e"):
        request.getfixturevalue("settings").PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
