"""Classes made when first named, for the modules whose classes need an optional
package (uvloop, httptools, aiohttp, uvicorn-worker): importing the module needs
none of them, naming a class imports what that class needs.

A module calls `made_on_first_use` from its `__getattr__` (PEP 562), which Python
asks only for a name the module does not hold yet: the classes made are stored in
the module, so each maker runs once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# A maker: imports what its classes need and makes them (all that share the import).
Maker = Callable[[], tuple[type[Any], ...]]


def made_on_first_use(namespace: dict[str, Any], makers: Mapping[str, Maker], name: str) -> Any:
    """The class `name` of the module whose globals are `namespace`, made by its maker
    together with the maker's other classes, each named as the module's own (as
    pickle, gunicorn and uvicorn name it: module.Class); AttributeError for a name
    no maker makes, as for any missing attribute."""
    module = namespace["__name__"]
    make = makers.get(name)
    if make is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    for cls in make():
        cls.__module__, cls.__qualname__ = module, cls.__name__
        namespace[cls.__name__] = cls
    return namespace[name]
