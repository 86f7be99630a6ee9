"""The confirmed result with its interval (issue 17): Job.best_confirmed, Turn.speed and
Turn.best_speedup_eager, filled for stored rows from their events; finished jobs' task_hash
becomes the sandbox's (webapp.jobs.models.task_hash). A queued or running job keeps its hash:
a resumed run checks it against the task event it recorded."""

from django.db import migrations, models

from sandbox.cache import sha256_text

TERMINAL = ("succeeded", "failed", "cancelled")


def _turn_speed(events):
    """Frozen here (webapp.jobs.turns.summarize may change later): the speed of the evaluation
    behind the turn's highest reward, or of its final evaluation; the last best's speedup."""
    last, speed, best, reward, final = None, None, None, None, None
    for e in events:
        kind = e.get("type")
        if kind == "evaluation":
            last = (e.get("result") or {}).get("speed")
            if e.get("purpose") == "final":
                final = e.get("result") or {}
        elif kind == "reward" and e.get("reward") is not None and (reward is None or e["reward"] >= reward):
            reward, speed = e["reward"], last
        elif kind == "best_changed":
            best = e
    if final is not None:
        speed = final.get("speed")
    return speed, (best or {}).get("speedup_vs_eager")


def forwards(apps, schema_editor):
    Job, Turn = apps.get_model("jobs", "Job"), apps.get_model("jobs", "Turn")
    for turn in Turn.objects.iterator(chunk_size=100):
        speed, best_eager = _turn_speed(turn.events or [])
        if speed is not None or best_eager is not None:
            Turn.objects.filter(pk=turn.pk).update(speed=speed, best_speedup_eager=best_eager)
    for job in Job.objects.filter(best_version__isnull=False).iterator(chunk_size=100):
        for turn in Turn.objects.filter(job=job).order_by("-index").only("events").iterator(chunk_size=8):
            events = turn.events or []
            at = max((i for i, e in enumerate(events) if e.get("type") == "best_changed"), default=None)
            if at is not None:
                ev = next(
                    (
                        e
                        for e in reversed(events[:at])
                        if e.get("type") == "evaluation" and e.get("version") == events[at].get("version")
                    ),
                    {},
                )
                Job.objects.filter(pk=job.pk).update(best_confirmed=ev.get("purpose") == "final")
                break
    for job in Job.objects.filter(state__in=TERMINAL).only("pk", "source").iterator(chunk_size=100):
        Job.objects.filter(pk=job.pk).update(task_hash=sha256_text(job.source))


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0003_job_scheduled"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="best_confirmed",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="turn",
            name="best_speedup_eager",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="turn",
            name="speed",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
