"""Type stub of the C module ``_envelope_native.c`` (unseal's fast path)."""

from collections.abc import Callable

from cryptography.exceptions import InvalidTag

from gossamer.errors import CryptoError
from gossamer.wire.envelope import Opened, ReplayWindows, _Window
from gossamer.wire.keyring import Keyring

def configure(
    opened: type[Opened],
    window: type[_Window],
    replay: type[ReplayWindows],
    keyring: type[Keyring],
    forged: Callable[[int, str], CryptoError],
    invalid_tag: type[InvalidTag],
    /,
) -> None: ...
def open_fast(
    keyring: Keyring, data: bytes, replay: ReplayWindows, max_payload: int, /
) -> Opened | None: ...
