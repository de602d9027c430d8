"""Reference solutions, mirroring exercises/ path for path."""
