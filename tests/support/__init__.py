"""Shared test helpers: real Redis, real worker and server subprocesses, a real browser.

Fixtures (reuse them; do not start your own workers or servers):

tests/conftest.py (every test):
    redis_url        session. The Redis URL of this test session: a database number of its own on
                     the Redis of REDIS_URL (default 127.0.0.1:6379), flushed at start and end, so
                     tests never see the running app's tasks. Django settings (Celery broker and
                     results, CHANNEL_LAYERS) and os.environ["REDIS_URL"] already point at it.
                     Fails the test (never skips) when no Redis answers.

tests/webapp/conftest.py (tests under tests/webapp/):
    live_stack_env   session. The environment for subprocesses of the live stack: the test
                     database (pytest-django's, created once; SQLite is a file so other processes
                     see it), the session's Redis, KERNELWRIGHT_BACKEND=cpu for workers.
    live_workers     session. One real Celery worker subprocess per queue (agent, compile, gpu;
                     names agent@…, compile@…, gpu0@…), answering pings before the first test.
                     A dict queue name -> tests.support.processes.ManagedProcess.
    live_asgi_server session. A real daphne serving webapp.asgi on a free loopback port, with
                     live_workers running: `.url` is "http://127.0.0.1:PORT". The model endpoint
                     is configured as http://127.0.0.1:9/v1 (never called) with a dummy key.
    chromium_browser function. Playwright's Chromium, Debian's /usr/bin/chromium, headless. Not
                     session-scoped: while Playwright's sync API is alive, async_to_sync refuses to
                     run in the test thread, and ORM calls need DJANGO_ALLOW_ASYNC_UNSAFE (set for
                     the fixture's lifetime). So call async code before or after, not during.
    browser_page     function. A fresh page (own context) in chromium_browser, closed afterwards.
                     Save screenshots with tests.support.browser.screenshot_path("name").

Data written by a test must be committed for the server or workers to see it: tests that use the
live stack and the database take `transactional_db` (or `@pytest.mark.django_db(transaction=True)`).
"""
