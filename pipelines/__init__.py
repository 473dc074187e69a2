"""kubetrain."""
