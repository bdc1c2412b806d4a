"""The floor between the core and the chapters: experiment specs, the one runner, the one results
table, and the scorecard's vocabulary. Chapters declare their experiments here as data and read
their science from a ``Results``; the command line runs any of them by name.
"""
