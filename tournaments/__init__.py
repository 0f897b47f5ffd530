"""Tournament formats, ratings with confidence intervals, the SQLite results store, reports."""
