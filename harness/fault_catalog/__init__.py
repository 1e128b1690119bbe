"""Built-in faults, one module per check family, each with a ``FAULTS`` list.

A module added here is picked up by :func:`harness.faults.registry` automatically.
"""
