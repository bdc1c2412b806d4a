"""One experiment module per chapter: ``chN_*`` declares that chapter's runs and
measurements.

Chapters import only :mod:`lengthgen_lite.core` and, where the book says a chapter
reuses an earlier one's setup, earlier chapters (every later chapter trains chapter 1's
baseline); never :mod:`lengthgen_lite.viz`.
"""
