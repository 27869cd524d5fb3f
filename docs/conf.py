"""Sphinx configuration: the guide and performance pages are Markdown (MyST), the API reference is autodoc."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "blasdx"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
master_doc = "contents"
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
myst_heading_anchors = 3
