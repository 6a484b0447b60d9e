"""cli: ``watchdog-sync demo | probe | gateway``; the top of the house."""
