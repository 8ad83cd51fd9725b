# Record building: what send() turns its Python arguments into before librdkafka copies them (the
# serializers' results, payload pointers, headers, the timestamp) and the topic-name check (included
# by _producer.pyx). Per record, without Python-level calls for bytes and str payloads.


_INT64_MAX = 2**63 - 1


cdef _check_topic_name(str topic, str who):
    """Kafka's topic name rule, checked before librdkafka sees the name (a NUL byte would
    truncate it there). Called only for topics not cached yet: valid names are checked once."""
    check_topic_name(topic, who)


cdef int64_t _timestamp_ms(object timestamp) except? -1:
    """``timestamp`` as epoch milliseconds in 0..2**63-1 (the int64 of the record format)."""
    cdef long long ms
    if type(timestamp) is int:  # the usual case: one C conversion
        try:
            ms = timestamp
        except OverflowError:
            ms = -1
        if ms >= 0:
            return <int64_t>ms
        raise ValueError(f"timestamp must be epoch milliseconds in 0..{_INT64_MAX} or None, "
                         f"got {timestamp!r}")
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise TypeError(f"timestamp must be int milliseconds or None, not "
                        f"{type(timestamp).__name__}")
    if isinstance(timestamp, float) and not math.isfinite(timestamp):
        raise ValueError(f"timestamp must be epoch milliseconds in 0..{_INT64_MAX} or None, "
                         f"got {timestamp!r}")
    v = int(timestamp)
    if v < 0 or v > _INT64_MAX:
        raise ValueError(f"timestamp must be epoch milliseconds in 0..{_INT64_MAX} or None, "
                         f"got {timestamp!r}")
    return <int64_t>v


cdef object _serialize(object serializer, object obj, str what):
    try:
        return serializer(obj)
    except KafkaError:
        raise
    except Exception as e:
        raise SerializationError(f"{what}_serializer failed on the {what}: {e!r}") from e


cdef const char *_utf8(object s, Py_ssize_t *n, str what) except NULL:
    try:
        return PyUnicode_AsUTF8AndSize(s, n)
    except UnicodeError as e:
        raise SerializationError(f"{what}: str cannot be encoded to UTF-8: {e}") from e


cdef inline object _payload(object obj, const char **ptr, Py_ssize_t *size, str what):
    """Points *ptr/*size at obj's bytes (bytes as is, str as UTF-8, other buffers copied) and
    returns the object that owns them, which the caller keeps alive until librdkafka copies."""
    if type(obj) is bytes:
        ptr[0] = PyBytes_AS_STRING(obj)
        size[0] = PyBytes_GET_SIZE(obj)
        return obj
    if isinstance(obj, str):
        ptr[0] = _utf8(obj, size, what)
        return obj
    obj = _to_bytes(obj, what)
    ptr[0] = PyBytes_AS_STRING(obj)
    size[0] = PyBytes_GET_SIZE(obj)
    return obj


cdef bytes _to_bytes(object v, str what):
    if isinstance(v, (bytes, bytearray, memoryview)):
        try:
            return bytes(v)
        except (TypeError, ValueError, BufferError) as e:
            raise SerializationError(f"{what}: cannot read the buffer: {e}") from e
    raise SerializationError(
        f"{what} must be bytes, bytearray, memoryview, str or None (or use a {what}_serializer), "
        f"not {type(v).__name__}")


cdef bytes _utf8_bytes(str s, str what):
    try:
        return s.encode()
    except UnicodeError as e:
        raise SerializationError(f"{what}: str cannot be encoded to UTF-8: {e}") from e


cdef rd_kafka_headers_t *_build_headers(object headers) except NULL:
    cdef rd_kafka_headers_t *hdrs
    cdef bytes bname, bval
    cdef const char *vp
    cdef Py_ssize_t vl
    if isinstance(headers, dict):
        items = list(headers.items())
    elif isinstance(headers, (list, tuple)):
        items = headers
    else:
        raise SerializationError(
            f"headers must be a list of (str, bytes|str|None) pairs or a dict, not {type(headers).__name__}")
    hdrs = rd_kafka_headers_new(len(items))
    try:
        for item in items:
            # a pair: a 2-character str would unpack too, and must not become a header
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise SerializationError(f"headers: each header must be a (name, value) pair, got {item!r}")
            name, val = item
            if not isinstance(name, str):
                raise SerializationError(f"headers: header name must be a str, not {type(name).__name__}")
            bname = c_string(name, "headers: header name", ValueError, True, SerializationError)
            if val is None:
                vp = NULL
                vl = 0
            else:
                if isinstance(val, str):
                    bval = _utf8_bytes(val, f"header {name!r} value")
                elif type(val) is bytes:
                    bval = val
                else:
                    bval = _to_bytes(val, f"header {name!r} value")
                vp = PyBytes_AS_STRING(bval)
                vl = PyBytes_GET_SIZE(bval)
            rd_kafka_header_add(hdrs, bname, len(bname), vp, vl)
    except BaseException:
        rd_kafka_headers_destroy(hdrs)
        raise
    return hdrs
