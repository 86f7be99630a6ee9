"""Load the gallery's case studies from trajectory files (default: webapp/jobs/fixtures/gallery/*.json).

Idempotent: a case study already loaded from a file of the same name is replaced, so re-running
after the fixtures change updates the gallery instead of duplicating it.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from webapp.jobs.importer import ImportRefused, import_trajectory
from webapp.jobs.models import Job

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "gallery"


class Command(BaseCommand):
    help = "Load trajectory JSON files as public gallery case studies."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="*", help="files or folders (default: the bundled fixtures)")

    def handle(self, *args, **options):
        files: list[Path] = []
        for p in [Path(x) for x in options["paths"]] or [DEFAULT_DIR]:
            files += sorted(p.glob("*.json")) if p.is_dir() else [p]
        if not files:
            self.stdout.write("no gallery fixtures found")
            return
        loaded = 0
        for path in files:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise CommandError(f"{path}: {exc}") from exc
            name = _case_name(data, path)
            Job.objects.filter(origin=Job.Origin.GALLERY, name=name).delete()
            try:
                job = import_trajectory(None, data, origin=Job.Origin.GALLERY, gallery=True, name=name)
            except ImportRefused as exc:
                raise CommandError(f"{path}: {exc}") from exc
            loaded += 1
            self.stdout.write(f"loaded {path.name} as job {job.pk} ({job.turns.count()} turns)")
        self.stdout.write(self.style.SUCCESS(f"{loaded} case studies loaded"))


def _case_name(data, path: Path) -> str:
    for e in data.get("events", []) if isinstance(data, dict) else []:
        if isinstance(e, dict) and e.get("type") == "task" and e.get("name"):
            return str(e["name"])[:200]
    return path.stem
