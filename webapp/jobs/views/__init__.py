"""Views of jobs: pages (pages, files, accounts) and the JSON API (api)."""
