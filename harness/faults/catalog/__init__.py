"""Built-in faults, one module per check family, each with a ``FAULTS`` list.

A module added here is picked up by :func:`harness.faults.registry` automatically (the
scope audits of every family live in :mod:`harness.faults.audit`).
"""
