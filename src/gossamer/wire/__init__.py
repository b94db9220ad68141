"""Pure codecs: bytes <-> frozen dataclasses. No I/O, no state between calls.

Decoders raise only ``gossamer.errors.DecodeError`` on malformed input.
"""
