"""Bitmaps in Redis' bit order (most significant bit of each byte first), built and read in
Python: a job's members, a checkpoint's consumed samples."""

from __future__ import annotations

__all__ = ["clear_bit", "set_bit", "test_bit"]


def set_bit(bits: bytearray, i: int) -> None:
    """Set bit ``i`` of ``bits`` in Redis' order."""
    bits[i >> 3] |= 0x80 >> (i & 7)


def clear_bit(bits: bytearray, i: int) -> None:
    """Clear bit ``i`` of ``bits`` in Redis' order."""
    bits[i >> 3] &= ~(0x80 >> (i & 7)) & 0xFF


def test_bit(bits: bytes | bytearray, i: int) -> bool:
    """Bit ``i`` of ``bits`` in Redis' order."""
    return bool(bits[i >> 3] & (0x80 >> (i & 7)))
