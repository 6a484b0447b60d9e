"""OpenTelemetry spans and GenAI metrics, built from the structured events (imports OTel)."""
