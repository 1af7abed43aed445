"""Sphinx configuration of perfgate's documentation (``make docs``: warnings are errors)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]

project = "perfgate"
author = "the perfgate developers"
extensions = ["myst_parser", "perfgate_options", "perfgate_schema"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_theme_options = {"description": "Performance gates for distributed PyTorch training, in pytest"}
nitpicky = True
