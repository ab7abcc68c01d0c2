"""The fault storm's bytes: content in which a shifted, repeated or missing run shows."""

from __future__ import annotations

import functools

_WORDS = 65_521  # a prime number of 4-byte counters per block: no power-of-two shift hides


@functools.lru_cache(maxsize=64)
def _block(seed: int) -> bytes:
    words = (((i * 2654435761 + seed) & 0xFFFFFFFF).to_bytes(4, "big") for i in range(_WORDS))
    return b"".join(words)


def payload(size: int, seed: int) -> bytes:
    block = _block(seed)
    return (block * (size // len(block) + 1))[:size]
