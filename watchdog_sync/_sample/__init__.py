"""sample: run_sample, the signal.alarm replacement for harnesses (thread or process isolation)."""
