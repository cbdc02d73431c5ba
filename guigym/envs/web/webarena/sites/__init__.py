"""Embedded real sites for WebArena-v0 (docs/architecture.md, "WebArena embedded sites")."""
