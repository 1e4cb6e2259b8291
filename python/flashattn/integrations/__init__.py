"""Integrations of flashattn with other libraries (each imported on demand)."""
