"""Celery tasks of jobs (owned by the web-app issue): thin wrappers around webapp.jobs.services."""
