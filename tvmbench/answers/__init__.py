"""Reads for people: result rows, rankings, comparisons, regressions, reports, each a DataFrame or rows."""
