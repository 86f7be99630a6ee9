"""Pages and the JSON API of jobs; the root URLconf includes these at "/"."""

from django.urls import path

from webapp.jobs.views import accounts, api, batch, compare, files, library, pages
from webapp.jobs.views import export as export_views

app_name = "jobs"

urlpatterns = [
    path("", pages.home, name="home"),
    path("accounts/signup/", accounts.signup, name="signup"),
    path("accounts/login/", accounts.Login.as_view(), name="login"),
    path("accounts/logout/", accounts.Logout.as_view(), name="logout"),
    path("account/tokens/", accounts.tokens, name="tokens"),
    path("account/tokens/<int:token_id>/delete/", accounts.token_delete, name="token_delete"),
    path("gallery/", pages.gallery, name="gallery"),
    path("compare/", compare.compare, name="compare"),
    path("jobs/new/", pages.new_job, name="new"),
    path("jobs/check/", pages.check_source, name="check"),
    path("jobs/import/", pages.import_view, name="import"),
    path("jobs/export/", export_views.export_page, name="export"),
    path("tasks/", library.task_library, name="task_library"),
    path("tasks/<int:folder>/<str:stem>/start/", library.start_from_library, name="task_start"),
    path("jobs/<int:job_id>/", pages.job_detail, name="detail"),
    path("jobs/<int:job_id>/updates/", pages.job_updates, name="updates"),
    path("jobs/<int:job_id>/head/", pages.job_head_html, name="head"),
    path("jobs/<int:job_id>/turns/<int:index>/html", pages.turn_detail_html, name="turn_html"),
    path("jobs/<int:job_id>/cancel/", pages.cancel, name="cancel"),
    path("jobs/<int:job_id>/retry/", pages.retry, name="retry"),
    path("jobs/<int:job_id>/visibility/", pages.visibility, name="visibility"),
    path("jobs/<int:job_id>/share/", pages.share_create, name="share_create"),
    path("jobs/<int:job_id>/share/revoke/", pages.share_revoke, name="share_revoke"),
    path("jobs/<int:job_id>/download/best.zip", files.download_zip, name="download_zip"),
    path("jobs/<int:job_id>/download/trajectory.json", files.download_trajectory, name="download_trajectory"),
    path("jobs/<int:job_id>/download/files/<path:path>", files.download_file, name="download_file"),
    path("s/<str:token>/", pages.share_open, name="share"),
    path("vendor/plotly.min.js", pages.plotly_js, name="plotly_js"),
    # JSON API
    path("api/openapi.json", api.openapi, name="api_openapi"),
    path("api/jobs", api.jobs, name="api_jobs"),
    path("api/jobs/<int:job_id>", api.job_detail, name="api_job"),
    path("api/jobs/<int:job_id>/turns", api.turns, name="api_turns"),
    path("api/jobs/<int:job_id>/turns/<int:index>", api.turn_detail, name="api_turn"),
    path("api/jobs/<int:job_id>/progress", api.progress, name="api_progress"),
    path("api/jobs/<int:job_id>/cancel", api.cancel, name="api_cancel"),
    path("api/jobs/<int:job_id>/artifacts", api.artifacts, name="api_artifacts"),
    path("api/jobs/<int:job_id>/artifacts/best.zip", api.artifacts_zip, name="api_artifacts_zip"),
    path("api/jobs/<int:job_id>/artifacts/files/<path:path>", api.artifact_file, name="api_artifact_file"),
    path("api/jobs/<int:job_id>/trajectory", api.trajectory, name="api_trajectory"),
    path("api/evaluate", api.evaluate, name="api_evaluate"),
    path("api/export", export_views.api_export, name="api_export"),
    path("api/evaluations", batch.evaluations_view, name="api_evaluations"),
    path("api/evaluations/<int:evaluation_id>", batch.evaluation_detail, name="api_evaluation"),
]
