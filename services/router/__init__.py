"""loopwire."""
