"""``simfl report STORE``: PNG figures of a results store and an ``index.html`` that shows them."""

from simfl.report.html import write_report

__all__ = ["write_report"]
