"""The Execution Summary's earlier import path, kept for code and docs that
use it: the summary lives in `daisy.report.execution_summary`."""

from daisy.report.execution_summary import (
    format_execution_summary,
    format_interrupted,
    print_execution_summary,
)

__all__ = ["format_execution_summary", "format_interrupted", "print_execution_summary"]
