"""The Celery app. Workers start with `celery -A webapp.celery:app worker -Q <queue>`.

Configuration comes from the Django settings (the CELERY_* names), queues and routes from
webapp/queues.py. Tasks are found in each installed app's `tasks` module.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("kernelwright")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Lazy: the modules load when the worker starts (or the app is finalised), after Django is set up.
app.autodiscover_tasks()
# `@shared_task` anywhere in the project binds to this app, in the web server as in workers.
app.set_default()
