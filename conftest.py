"""Registers the perfgate plugin for this checkout, installed or not (the pytest11 entry point does
the same for an installed perfgate; both name the plugin `perfgate.plugin`, so it loads once)."""

pytest_plugins = ("perfgate.plugin",)
