"""Exercise stubs, catalogs, hidden checks and cards, one folder per topic."""
