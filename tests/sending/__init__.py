"""send(): the tests of aiosendfile/_sending/."""
