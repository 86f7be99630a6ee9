"""Test support shipped with the package: the scripted OpenAI-compatible server and its scenarios."""
