"""image stage."""
