"""The project around the package: its docs, version, bench and test run."""
