"""What several manufacturers share; no manufacturer of its own (docs/architecture.md)."""
