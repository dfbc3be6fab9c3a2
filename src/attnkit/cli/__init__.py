"""The ``attnkit`` command line: one entry point, one sub-command per job."""
