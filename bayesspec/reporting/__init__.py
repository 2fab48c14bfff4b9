"""Documents, pages and figures for people: summaries, the decision report, plots."""
