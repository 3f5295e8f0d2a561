"""Data: cheap peeks for the preflight (`peek`) and the full mapping to TRL rows (`mapping`)."""
