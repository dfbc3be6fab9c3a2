"""Tasks: the glue between a data source, a model and the shared training loop."""
