"""Modules placed on the candidate child's sys.path (only `kwrt` for now)."""
