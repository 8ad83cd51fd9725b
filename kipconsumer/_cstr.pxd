# cython: language_level=3
"""The one conversion of a Python str to a C string (``char *``) for librdkafka.

C strings end at the first NUL, so a str holding one would silently reach librdkafka cut short
(another group, topic or password than the caller gave). Every str that becomes a ``char *`` goes
through :func:`c_string`, which refuses a NUL and text that cannot be encoded, naming the argument.
"""


cdef inline bytes c_string(object s, str what, object error=ValueError, bint show=True,
                           object encode_error=None):
    """UTF-8 bytes of ``s`` for a NUL-terminated C string.

    Raises ``error`` (a ValueError subclass) naming ``what`` if ``s`` is not a str, holds a NUL
    character or cannot be encoded to UTF-8 (``encode_error`` instead, if given, for the last
    case); the value itself is shown only if ``show`` (never for secrets)."""
    cdef bytes b
    shown = f": {s!r}" if show else ""
    if not isinstance(s, str):
        raise error(f"{what} must be a str, not {type(s).__name__}")
    try:
        b = (<str>s).encode("utf-8")
    except UnicodeError as e:
        raise (encode_error or error)(f"{what} cannot be encoded to UTF-8 ({e.reason}){shown}") from None
    if b"\x00" in b:
        raise error(f"{what} must not contain a NUL character (C strings end there){shown}")
    return b
