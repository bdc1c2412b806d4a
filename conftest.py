"""Loads the notebook plugin for every pytest run, whichever paths it is given (see
tests/nbval_tolerant.py), and pytester for the plugin's own tests."""

pytest_plugins = ["nbval_tolerant", "pytester"]
