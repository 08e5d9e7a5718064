"""Process functions of the runtime benchmarks, in a module of their own.

Worker processes import the module a function was defined in to unpickle
it; defined in the benchmark file, that would import pytest into every
worker and time pytest's start-up instead of daisy's. Only daisy's shared
(1.x) API is used, as in the benchmark file."""

import daisy


def noop(block):
    """A block function that does nothing."""


def client_loop():
    """A worker function that takes blocks until there are none."""
    client = daisy.Client()
    while True:
        with client.acquire_block() as block:
            if block is None:
                break
