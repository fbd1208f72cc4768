"""llamon_agent.a2a.to_request: every A2A shape gives the same AgentRequest; bad input says what is wrong."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from a2a.compat.v0_3 import types as v03
from a2a.helpers import new_data_part, new_raw_part, new_text_part, new_url_part
from a2a.types import Message, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamon_agent.a2a import MAX_DEPTH, MAX_MESSAGE_BYTES, A2AFormatError, to_request
from llamon_agent.tools import AgentRequest

TEXTS = ["주문 A-1001 조회 부탁해", "영수증도 보내주세요"]
DATA: list[Any] = [
    {"chatbotId": "premium-support", "amount": 12000, "ratio": 0.25, "neg": -3},
    {"nested": {"items": [{"sku": "BP-200", "qty": 2}, 2.5, True, None], "empty": {}, "list": []}},
    "a bare string",
    42,
    [1, "two", {"three": 3}],
]
RAW = b"%PDF-1.7\n\x00\xff fake scan"
URL = "https://files.example.com/receipt.pdf"
METADATA = {"userId": "C-1001", "chatbotId": "premium-support", "priority": 2}

EXPECTED = AgentRequest(
    query="주문 A-1001 조회 부탁해\n영수증도 보내주세요",
    context={**METADATA, "sessionId": "ctx-42", "taskId": "task-7"},
    a2a_data=[
        DATA[0],
        DATA[1],
        {"value": "a bare string"},
        {"value": 42},
        {"value": [1, "two", {"three": 3}]},
    ],
    a2a_files=[
        {"name": "receipt.pdf", "mimeType": "application/pdf", "uri": URL, "size": None},
        {"name": "scan.png", "mimeType": "image/png", "uri": None, "size": len(RAW)},
    ],
)


def _boxed(value: Any) -> dict[str, Any]:
    # 0.3 DataPart.data must be an object, so a 0.3 sender boxes a bare value itself.
    return value if isinstance(value, dict) else {"value": value}


def _v03_json() -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": "m-1",
        "role": "user",
        "contextId": "ctx-42",
        "taskId": "task-7",
        "metadata": METADATA,
        "parts": [
            {"kind": "text", "text": TEXTS[0]},
            *({"kind": "data", "data": _boxed(value)} for value in DATA),
            {"kind": "file", "file": {"uri": URL, "name": "receipt.pdf", "mimeType": "application/pdf"}},
            {
                "kind": "file",
                "file": {
                    "bytes": base64.b64encode(RAW).decode(),
                    "name": "scan.png",
                    "mimeType": "image/png",
                },
            },
            {"kind": "text", "text": TEXTS[1]},
        ],
    }


def _v03_pydantic() -> v03.Message:
    return v03.Message(
        message_id="m-1",
        role=v03.Role.user,
        context_id="ctx-42",
        task_id="task-7",
        metadata=METADATA,
        parts=[
            v03.Part(root=v03.TextPart(text=TEXTS[0])),
            *(v03.Part(root=v03.DataPart(data=_boxed(value))) for value in DATA),
            v03.Part(
                root=v03.FilePart(
                    file=v03.FileWithUri(uri=URL, name="receipt.pdf", mime_type="application/pdf")
                )
            ),
            v03.Part(
                root=v03.FilePart(
                    file=v03.FileWithBytes(
                        bytes=base64.b64encode(RAW).decode(), name="scan.png", mime_type="image/png"
                    )
                )
            ),
            v03.Part(root=v03.TextPart(text=TEXTS[1])),
        ],
    )


def _v10_proto() -> Message:
    return Message(
        message_id="m-1",
        role=Role.ROLE_USER,
        context_id="ctx-42",
        task_id="task-7",
        metadata=METADATA,
        parts=[
            new_text_part(TEXTS[0]),
            *(new_data_part(value) for value in DATA),
            new_url_part(URL, media_type="application/pdf", filename="receipt.pdf"),
            new_raw_part(RAW, media_type="image/png", filename="scan.png"),
            new_text_part(TEXTS[1]),
        ],
    )


SHAPES = {
    "0.3 json dict": _v03_json,
    "0.3 json text": lambda: json.dumps(_v03_json(), ensure_ascii=False),
    "0.3 pydantic": _v03_pydantic,
    "1.0 protobuf": _v10_proto,
    "1.0 json dict": lambda: MessageToDict(_v10_proto()),
    "1.0 json text": lambda: json.dumps(MessageToDict(_v10_proto())),
}


def _exact(request: AgentRequest) -> str:
    # `3 == 3.0` in Python, so plain equality would hide a float that should have become an int.
    return json.dumps(request.to_json(), sort_keys=True, ensure_ascii=False)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_a2a_shape_gives_the_same_request(shape: str) -> None:
    request = to_request(SHAPES[shape]())
    assert request == EXPECTED
    assert _exact(request) == _exact(EXPECTED)


def test_protobuf_numbers_come_back_as_ints_but_fractions_stay() -> None:
    request = to_request(_v10_proto())
    assert request.a2a_data is not None
    assert type(request.a2a_data[0]["amount"]) is int
    assert type(request.a2a_data[0]["ratio"]) is float
    assert type(request.context["priority"]) is int


def test_file_bytes_are_never_kept_only_their_size() -> None:
    request = to_request(_v03_json())
    dumped = json.dumps(request.to_json())
    assert base64.b64encode(RAW).decode() not in dumped
    assert request.a2a_files is not None and request.a2a_files[1]["size"] == len(RAW)


ENVELOPES = {
    "0.3 json-rpc": lambda: {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": _v03_json()},
    },
    "1.0 json-rpc": lambda: {
        "jsonrpc": "2.0",
        "id": "r-1",
        "method": "SendMessage",
        "params": {"message": MessageToDict(_v10_proto())},
    },
    "json-rpc as text": lambda: json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": _v03_json()}}
    ),
    "json-rpc as bytes": lambda: json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": _v03_json()}}
    ).encode(),
    "message wrapper": lambda: {"message": _v03_json()},
    "1.0 SendMessageRequest protobuf": lambda: SendMessageRequest(message=_v10_proto()),
    "0.3 SendMessageRequest pydantic": lambda: v03.SendMessageRequest(
        id=1, params=v03.MessageSendParams(message=_v03_pydantic())
    ),
}


@pytest.mark.parametrize("envelope", ENVELOPES)
def test_send_envelopes_are_unwrapped(envelope: str) -> None:
    assert _exact(to_request(ENVELOPES[envelope]())) == _exact(EXPECTED)


def test_bare_value_in_a_03_data_part_is_boxed_too() -> None:
    request = to_request({"parts": [{"kind": "data", "data": [1, 2.0]}, {"kind": "data", "data": None}]})
    assert request.a2a_data == [{"value": [1, 2]}, {"value": None}]


def test_metadata_session_id_wins_over_context_id() -> None:
    request = to_request({"contextId": "ctx", "metadata": {"sessionId": "s-1"}, "parts": [{"text": "hi"}]})
    assert request.context == {"sessionId": "s-1"}


def test_message_without_data_files_or_ids_gives_nones_and_empty_context() -> None:
    request = to_request(Message(role=Role.ROLE_USER, parts=[new_text_part("hello")]))
    assert request == AgentRequest(query="hello", context={}, a2a_data=None, a2a_files=None)


def test_data_only_message_has_empty_query() -> None:
    request = to_request({"parts": [{"data": {"chatbotId": "x"}}]})
    assert request.query == ""
    assert request.a2a_data == [{"chatbotId": "x"}]


def test_unpadded_wrapped_and_urlsafe_base64_is_accepted() -> None:
    raw = bytes(range(256))
    urlsafe = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    wrapped = "\n".join(urlsafe[i : i + 76] for i in range(0, len(urlsafe), 76))
    request = to_request({"parts": [{"raw": wrapped}, {"kind": "file", "file": {"bytes": urlsafe}}]})
    assert [f["size"] for f in request.a2a_files or []] == [256, 256]
    assert request.a2a_files[0] == {"name": None, "mimeType": None, "uri": None, "size": 256}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


MALFORMED: dict[str, tuple[Any, str]] = {
    "not a message type": (42, "got int"),
    "none": (None, "got NoneType"),
    "not json text": ("{nope", "not valid JSON: Expecting property name"),
    "json text of a list": ("[1, 2]", "an A2A message is a JSON object, got a list"),
    "not utf-8 bytes": (b"\xff\xfe", "not UTF-8"),
    "no parts": ({"messageId": "m"}, "has no 'parts' list (keys found: messageId)"),
    "parts not a list": ({"parts": "hi"}, "'parts' must be a list, got a string"),
    "empty parts": ({"parts": []}, "'parts' is empty"),
    "part not an object": ({"parts": ["hi"]}, "part 1 must be an object, got a string"),
    "unknown kind": ({"parts": [{"kind": "image", "url": "x"}]}, "part 1 has unknown kind 'image'"),
    "text part without text": ({"parts": [{"kind": "text"}]}, "part 1 (kind 'text') needs a 'text' string"),
    "text not a string": ({"parts": [{"text": 5}]}, "part 1 'text' must be a string, got a number"),
    "data part without data": (
        {"parts": [{"kind": "text", "text": "a"}, {"kind": "data"}]},
        "part 2 (kind 'data') has no 'data'",
    ),
    "file not an object": (
        {"parts": [{"kind": "file", "file": "x.pdf"}]},
        "part 1 (kind 'file') needs a 'file' object",
    ),
    "file with neither": (
        {"parts": [{"kind": "file", "file": {"name": "a"}}]},
        "exactly one of 'uri' and 'bytes'",
    ),
    "file with both": (
        {"parts": [{"kind": "file", "file": {"uri": "https://x", "bytes": "AA=="}}]},
        "exactly one of 'uri' and 'bytes'",
    ),
    "bad base64 (0.3)": (
        {"parts": [{"kind": "file", "file": {"bytes": "not base64!"}}]},
        "part 1 (file) 'bytes' is not valid base64",
    ),
    "bad base64 (1.0)": ({"parts": [{"text": "a"}, {"raw": "A"}]}, "part 2 'raw' is not valid base64"),
    "bytes not a string": ({"parts": [{"raw": 12}]}, "part 1 'raw' must be a base64 string, got a number"),
    "empty url": ({"parts": [{"url": ""}]}, "part 1 'url' must be a non-empty string"),
    "filename not a string": (
        {"parts": [{"url": "https://x", "filename": 3}]},
        "part 1 'filename' must be a string",
    ),
    "two contents in a 1.0 part": ({"parts": [{"text": "a", "url": "b"}]}, "part 1 holds text and url"),
    "1.0 part without content": ({"parts": [{"mediaType": "text/plain"}]}, "part 1 has no content"),
    "data not json (set)": (
        {"parts": [{"kind": "data", "data": {"x": {1, 2}}}]},
        "part 1 data.x is a set, which is not JSON",
    ),
    "data not json (nan)": ({"parts": [{"data": {"x": [0, float("nan")]}}]}, "part 1 data.x[1] is nan"),
    "data with non-string key": ({"parts": [{"data": {"a": {1: "x"}}}]}, "part 1 data.a has the key 1"),
    "data nested too deep": (
        {"parts": [{"data": _nested(MAX_DEPTH + 1)}]},
        f"nested more than {MAX_DEPTH} levels",
    ),
    "json text nested too deep": ("[" * 100_000 + "]" * 100_000, "nested more than"),
    "metadata not an object": (
        {"metadata": [1], "parts": [{"text": "a"}]},
        "'metadata' must be an object, got a list",
    ),
    "metadata not json": (
        {"metadata": {"when": object()}, "parts": [{"text": "a"}]},
        "metadata.when is a object",
    ),
    "context id not a string": ({"contextId": 7, "parts": [{"text": "a"}]}, "'contextId' must be a string"),
    "unknown role": ({"role": "bot", "parts": [{"text": "a"}]}, "unknown role 'bot'"),
    "a task, not a message": ({"kind": "task", "parts": [{"text": "a"}]}, "got an object of kind 'task'"),
    "json-rpc other method": (
        {"jsonrpc": "2.0", "method": "tasks/get", "params": {}},
        "'tasks/get' does not carry a message",
    ),
    "json-rpc without message": (
        {"jsonrpc": "2.0", "method": "message/send", "params": {}},
        "needs 'params.message', an object",
    ),
    "message wrapper not an object": ({"message": "hi"}, "'message' must be an object"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_input_raises_a_readable_a2a_format_error(case: str) -> None:
    value, expected = MALFORMED[case]
    with pytest.raises(A2AFormatError) as info:
        to_request(value)
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


def _message_of_size(size: int) -> dict[str, Any]:
    bare = json.dumps({"parts": [{"text": ""}]}, separators=(",", ":"))
    return {"parts": [{"text": "x" * (size - len(bare))}]}


def test_message_at_the_size_cap_is_accepted() -> None:
    assert len(to_request(_message_of_size(MAX_MESSAGE_BYTES)).query) > 1_000_000


@pytest.mark.parametrize("as_", ["dict", "text", "protobuf"])
def test_message_over_the_size_cap_is_refused(as_: str) -> None:
    big = _message_of_size(MAX_MESSAGE_BYTES + 1)
    value: Any = {
        "dict": big,
        "text": json.dumps(big, separators=(",", ":")),
        "protobuf": Message(parts=[new_text_part(big["parts"][0]["text"])]),
    }[as_]
    with pytest.raises(A2AFormatError, match=r"over 1,048,576 bytes \(1024 KiB\).*send large files by uri"):
        to_request(value)


# Property: the same random content sent as a 0.3 JSON message and as a 1.0 protobuf reads the same.
# Ints stay within 2**53 (a double holds them exactly); strings avoid lone surrogates (not UTF-8).
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=16,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(_text, max_size=3),
    values=st.lists(_json_values, min_size=1, max_size=3),
    metadata=st.dictionaries(_text, _json_values, max_size=3),
    context_id=_text,
)
def test_03_and_10_shapes_agree_on_random_content(
    texts: list[str], values: list[Any], metadata: dict[str, Any], context_id: str
) -> None:
    v03_json = {
        "role": "user",
        "contextId": context_id,
        "metadata": metadata,
        "parts": [{"kind": "text", "text": t} for t in texts]
        + [{"kind": "data", "data": _boxed(v)} for v in values],
    }
    proto = Message(
        role=Role.ROLE_USER,
        context_id=context_id,
        metadata=metadata,
        parts=[new_text_part(t) for t in texts] + [new_data_part(v) for v in values],
    )
    from_03 = to_request(json.dumps(v03_json))
    assert _exact(to_request(proto)) == _exact(from_03)
    assert _exact(to_request(MessageToDict(proto))) == _exact(from_03)
    assert from_03.query == "\n".join(texts)
    assert len(from_03.a2a_data or []) == len(values)
