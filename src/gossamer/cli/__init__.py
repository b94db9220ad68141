"""The ``gossamer`` command line."""
