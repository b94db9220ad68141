from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ["body", "clock", "dst_tag", "kind", "src_tag"]
    BODY_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    DST_TAG_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SRC_TAG_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    clock: int
    dst_tag: str
    kind: bytes
    src_tag: str
    def __init__(self, src_tag: _Optional[str] = ..., dst_tag: _Optional[str] = ..., kind: _Optional[bytes] = ..., clock: _Optional[int] = ..., body: _Optional[bytes] = ...) -> None: ...

class Fields(_message.Message):
    __slots__ = ["entries"]
    class EntriesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.MessageMap[str, Value]
    def __init__(self, entries: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class Hop(_message.Message):
    __slots__ = ["clock", "socket"]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    clock: int
    socket: SocketName
    def __init__(self, clock: _Optional[int] = ..., socket: _Optional[_Union[SocketName, _Mapping]] = ...) -> None: ...

class Routed(_message.Message):
    __slots__ = ["body", "hops"]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    hops: _containers.RepeatedCompositeFieldContainer[Hop]
    def __init__(self, hops: _Optional[_Iterable[_Union[Hop, _Mapping]]] = ..., body: _Optional[bytes] = ...) -> None: ...

class SocketName(_message.Message):
    __slots__ = ["node", "tag"]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    node: str
    tag: str
    def __init__(self, node: _Optional[str] = ..., tag: _Optional[str] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ["bool_value", "double_value", "float_value", "int32_value", "string_value"]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT32_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    bool_value: bool
    double_value: float
    float_value: float
    int32_value: int
    string_value: str
    def __init__(self, int32_value: _Optional[int] = ..., float_value: _Optional[float] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., bool_value: bool = ...) -> None: ...
