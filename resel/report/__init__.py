"""The report of a stored run: its figures (:mod:`resel.report.plots`, matplotlib) and one
self-contained HTML page (:mod:`resel.report.html`), both drawn from the run store only.

Importing this package loads neither: matplotlib comes with :mod:`resel.report.plots`, which
``resel report --plot/--html`` imports through :mod:`resel.cli.report_plots` when asked.
"""
