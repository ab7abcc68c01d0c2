"""receive(): the tests of aiosendfile/_receiving/."""
