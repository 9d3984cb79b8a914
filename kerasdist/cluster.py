"""TF_CONFIG building and validation, a local multi-worker launcher, chief/worker/evaluator roles."""


def add_commands(commands, add_training_arguments):
    """Add the ``worker`` and ``launch`` subcommands (each sets ``handler``)."""
