"""The ``relative`` precision standard's limits, as data without torch.

:data:`harness.compare.STANDARDS` judges with them; the report (``harness report``,
:mod:`harness.report.model`) reads them from here to say how near its limit a record's
ratio is, without importing torch (a second of every report, and a report must build
where torch does not import).
"""

RELATIVE = {"max_rel_err": 10.0, "mean_rel_err": 2.0, "rmse": 2.0, "small_abs_err": 2.0}
"""DUT error / the CPU's own error in the same dtype, at most (Note [Precision standards]
in :mod:`harness.compare`)."""
