"""The HTML report's earlier import path, kept for code and docs that use
it: the report lives in `daisy.report.html`."""

from daisy.report.html import report_layout, verdict, write_html_report

__all__ = ["report_layout", "verdict", "write_html_report"]
