"""Load the gallery's case studies from trajectory files (default: webapp/jobs/fixtures/gallery/*.json).

Idempotent, and a case study keeps its id (so its URL, /jobs/<id>/) across loads and restarts:
each is keyed by its file's name (`Job.gallery_key`). A file loaded before with the same content
(`Job.gallery_digest`, its SHA-256) is left as it is; a changed file updates its job in place.
A case study of an older load without a key (matched by its name) is adopted, not re-created.
A KernelBench case study holds none of KernelBench's text (benchmarks.kbfixture): it is loaded
with the text put back from a local checkout, and skipped (said so) without one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from webapp.jobs.importer import ImportRefused, import_trajectory
from webapp.jobs.models import Job

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "gallery"


class Command(BaseCommand):
    help = "Load trajectory JSON files as public gallery case studies (stable ids: keyed by file name)."

    def add_arguments(self, parser):
        from benchmarks import kbfixture  # lazily, as every entry point into benchmarks/ (docs/architecture.md)

        parser.add_argument("paths", nargs="*", help="files or folders (default: the bundled fixtures)")
        parser.add_argument(
            "--kernelbench",
            help=f"a KernelBench checkout's problem folder, for the KernelBench case studies (default: ${kbfixture.CHECKOUT_ENV}, "
            "else .kernelbench/KernelBench/KernelBench)",
        )

    def _restored(self, path: Path, data: dict, root: str | None) -> dict | None:
        """A KernelBench case study with the problem's text put back from a local checkout, or None
        (said on stdout) when there is none or it is another version: the fixture holds none of it."""
        from benchmarks import kbfixture

        where = Path(root) if root else kbfixture.checkout()
        if where is None:
            self.stdout.write(
                f"{path.name}: skipped, a KernelBench case study needs a KernelBench checkout "
                f"(git clone https://github.com/ScalingIntelligence/KernelBench, then ${kbfixture.CHECKOUT_ENV}=<it>/KernelBench)"
            )
            return None
        try:
            return kbfixture.restore(data, where)
        except kbfixture.RestoreError as exc:
            self.stdout.write(f"{path.name}: skipped, {exc}")
            return None

    def handle(self, *args, **options):
        from benchmarks import kbfixture

        files: list[Path] = []
        for p in [Path(x) for x in options["paths"]] or [DEFAULT_DIR]:
            files += sorted(p.glob("*.json")) if p.is_dir() else [p]
        if not files:
            self.stdout.write("no gallery fixtures found")
            return
        counts = {"new": 0, "updated": 0, "unchanged": 0, "skipped": 0}
        for path in files:
            try:
                raw = path.read_bytes()
                data = json.loads(raw.decode("utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CommandError(f"{path}: {exc}") from exc
            if kbfixture.is_kernelbench(data):
                data = self._restored(path, data, options.get("kernelbench"))
                if data is None:
                    counts["skipped"] += 1
                    continue
            outcome, job = load_case(path.stem, _case_name(data, path), data, hashlib.sha256(raw).hexdigest())
            counts[outcome] += 1
            self.stdout.write(f"{path.name}: {outcome}, job {job.pk} ({job.turns.count()} turns)")
        self.stdout.write(
            self.style.SUCCESS(
                f"{len(files)} case studies: {counts['new']} new, {counts['updated']} updated, {counts['unchanged']} unchanged"
                + (f", {counts['skipped']} KernelBench case(s) skipped" if counts["skipped"] else "")
            )
        )


@transaction.atomic
def load_case(key: str, name: str, data, digest: str) -> tuple[str, Job]:
    """("new" | "updated" | "unchanged", the job) for the case study keyed `key`."""
    job = Job.objects.select_for_update().filter(gallery_key=key).first()
    if job is None:
        # A case study loaded before keys existed: the oldest of that name becomes this key's.
        legacy = list(Job.objects.filter(origin=Job.Origin.GALLERY, gallery_key__isnull=True, name=name).order_by("pk"))
        if legacy:
            job = legacy[0]
            Job.objects.filter(pk__in=[j.pk for j in legacy[1:]]).delete()
    if job is not None and job.gallery_digest == digest:
        return "unchanged", job
    outcome = "new" if job is None else "updated"
    try:
        job = import_trajectory(None, data, origin=Job.Origin.GALLERY, gallery=True, name=name, into=job)
    except ImportRefused as exc:
        raise CommandError(f"{key}: {exc}") from exc
    Job.objects.filter(pk=job.pk).update(gallery_key=key, gallery_digest=digest)
    job.refresh_from_db()
    return outcome, job


def _case_name(data, path: Path) -> str:
    for e in data.get("events", []) if isinstance(data, dict) else []:
        if isinstance(e, dict) and e.get("type") == "task" and e.get("name"):
            return str(e["name"])[:200]
    return path.stem
