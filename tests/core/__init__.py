"""The core: the one-step sendfile() of aiosendfile/_core.py, _core_py.py and csrc/."""
