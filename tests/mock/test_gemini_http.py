"""Gemini native API over plain HTTP (no Gemini SDK in the venv)."""

import json

import pytest

M = "/v1beta/models/gemini-2.0-flash"
E = "/v1beta/models/text-embedding-004"
KEY = {"x-goog-api-key": "mock-gemini-key-1", "content-type": "application/json"}
HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello there world"}]}]}


def test_generate_with_header_or_query_key(mock):
    for path, headers in [(M + ":generateContent", KEY),
                          (M + ":generateContent?key=mock-gemini-key-1", {"content-type": "application/json"})]:
        status, _, body = mock.request("POST", path, HELLO, headers)
        assert status == 200, body
        v = json.loads(body)
        cand = v["candidates"][0]
        assert cand["content"] == {"role": "model", "parts": [{"text": "mock response to: hello there world"}]}
        assert cand["finishReason"] == "STOP"
        assert v["usageMetadata"] == {"promptTokenCount": 5, "candidatesTokenCount": 9, "totalTokenCount": 14}


def test_stream_sse(mock):
    status, headers, body = mock.request("POST", M + ":streamGenerateContent?alt=sse", HELLO, KEY)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [e for e in body.decode().split("\r\n\r\n") if e]
    docs = [json.loads(e[len("data: "):]) for e in events]
    text = "".join(d["candidates"][0]["content"]["parts"][0]["text"] for d in docs)
    assert text == "mock response to: hello there world"
    assert docs[-1]["candidates"][0]["finishReason"] == "STOP"
    assert docs[-1]["usageMetadata"]["candidatesTokenCount"] == 9
    assert all("finishReason" not in d["candidates"][0] for d in docs[:-1])


def test_stream_json_array_without_alt(mock):
    status, _, body = mock.request("POST", M + ":streamGenerateContent", HELLO, KEY)
    docs = json.loads(body)
    assert status == 200 and isinstance(docs, list)
    assert "".join(d["candidates"][0]["content"]["parts"][0]["text"] for d in docs) == "mock response to: hello there world"


def test_function_call(mock):
    req = HELLO | {"tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": {
        "type": "OBJECT", "properties": {"city": {"type": "STRING"}}}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}}
    status, _, body = mock.request("POST", M + ":generateContent", req, KEY)
    assert status == 200, body
    part = json.loads(body)["candidates"][0]["content"]["parts"][0]
    assert part == {"functionCall": {"name": "get_weather", "args": {"city": "mock"}}}
    follow = {"contents": HELLO["contents"] + [
        {"role": "model", "parts": [part]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"t": 20}}}]}]}
    assert mock.request("POST", M + ":generateContent", follow, KEY)[0] == 200
    follow["contents"][2]["parts"][0]["functionResponse"]["name"] = "other"
    status, _, body = mock.request("POST", M + ":generateContent", follow, KEY)
    assert status == 400 and json.loads(body)["error"]["status"] == "INVALID_ARGUMENT"


def test_embeddings(mock):
    status, _, body = mock.request("POST", E + ":embedContent", {"content": {"parts": [{"text": "hi"}]}}, KEY)
    assert status == 200 and len(json.loads(body)["embedding"]["values"]) == 768
    batch = {"requests": [{"model": "models/text-embedding-004", "content": {"parts": [{"text": t}]},
                           "outputDimensionality": 8} for t in ["a", "b", "c"]]}
    status, _, body = mock.request("POST", E + ":batchEmbedContents", batch, KEY)
    embs = json.loads(body)["embeddings"]
    assert status == 200 and len(embs) == 3 and all(len(e["values"]) == 8 for e in embs)
    batch["requests"][1]["model"] = "models/gemini-2.0-flash"
    assert mock.request("POST", E + ":batchEmbedContents", batch, KEY)[0] == 400


@pytest.mark.parametrize("path,body,headers,status,grpc_status", [
    (M + ":generateContent", HELLO, {"content-type": "application/json"}, 403, "PERMISSION_DENIED"),
    (M + ":generateContent", HELLO, {"x-goog-api-key": "wrong"}, 400, "INVALID_ARGUMENT"),
    (M + ":generateContent", HELLO, {"x-goog-api-key": "mock-gemini-key-429"}, 429, "RESOURCE_EXHAUSTED"),
    ("/v1beta/models/gemini-0:generateContent", HELLO, KEY, 404, "NOT_FOUND"),
    (E + ":generateContent", HELLO, KEY, 404, "NOT_FOUND"),
    (M + ":generateContent", {}, KEY, 400, "INVALID_ARGUMENT"),
    (M + ":generateContent", HELLO | {"temperature": 1}, KEY, 400, "INVALID_ARGUMENT"),
    (M + ":generateContent", {"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, KEY, 400, "INVALID_ARGUMENT"),
    (M + ":generateContent", {"contents": [{"role": "user", "parts": []}]}, KEY, 400, "INVALID_ARGUMENT"),
    (M + ":generateContent", b"{oops", KEY, 400, "INVALID_ARGUMENT"),
    (M + ":generateContent", HELLO, KEY | {"x-mock-error": "503"}, 503, "UNAVAILABLE"),
])
def test_errors(mock, path, body, headers, status, grpc_status):
    got, _, out = mock.request("POST", path, body, headers)
    assert got == status, out
    err = json.loads(out)["error"]
    assert err["code"] == status and err["status"] == grpc_status and err["message"]
