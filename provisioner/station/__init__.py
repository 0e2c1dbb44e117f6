"""station stage."""
