"""Checkers: pure ``DataFrame -> DataFrame`` transforms returning a run's violations.

One module per layer. Every checker takes a loaded run (``EVENTS_SCHEMA``) and
returns one row per violation, with the columns that explain it and a ``detail``
sentence; an empty result means the property held. ``gossamer.analysis.catalog``
lists them with their properties and parameters.
"""
