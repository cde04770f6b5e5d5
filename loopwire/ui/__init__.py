"""The session inspector served by `loopwire ui` (app.py; the pages in static/)."""
