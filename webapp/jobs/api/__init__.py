"""The JSON API's declared schemas: requests (validation) and responses, and the OpenAPI document
generated from them. The views are plain Django views in webapp.jobs.views.api (docs/webapp.md
says why not django-ninja)."""
