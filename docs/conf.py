"""Sphinx configuration for the watchdog_sync documentation."""

from __future__ import annotations

project = "watchdog_sync"
author = "watchdog_sync developers"
copyright = "2026, watchdog_sync developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
myst_heading_anchors = 3
nitpicky = False
suppress_warnings = ["myst.xref_missing"]
