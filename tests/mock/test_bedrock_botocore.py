"""Bedrock Converse/ConverseStream checked with botocore: its SigV4 signer
makes the signatures the mock verifies, and its event-stream parser decodes
the mock's binary stream (prelude and message CRCs included)."""

import json
import urllib.request

import botocore.session
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
HELLO = [{"role": "user", "content": [{"text": "hello there world"}]}]
TOOLS = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}],
    "toolChoice": {"any": {}}}


def client(mock, key="AKIDMOCKBEDROCK1", secret="mock-bedrock-secret-1", region="us-east-1"):
    s = botocore.session.get_session()
    return s.create_client(
        "bedrock-runtime", region_name=region, endpoint_url=mock.base,
        aws_access_key_id=key, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )


def test_converse(mock):
    r = client(mock).converse(modelId=MODEL, messages=HELLO, system=[{"text": "be brief"}],
                              inferenceConfig={"maxTokens": 100})
    assert r["output"]["message"]["content"] == [{"text": "mock response to: hello there world"}]
    assert r["stopReason"] == "end_turn"
    assert r["usage"] == {"inputTokens": 7, "outputTokens": 9, "totalTokens": 16}


def test_converse_stream_decoded_by_botocore(mock):
    r = client(mock).converse_stream(modelId=MODEL, messages=HELLO)
    events = list(r["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-3:] == ["contentBlockStop", "messageStop", "metadata"]
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
    assert text == "mock response to: hello there world"
    assert events[-2]["messageStop"]["stopReason"] == "end_turn"
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 9


def test_converse_stream_tool_use(mock):
    r = client(mock).converse_stream(modelId=MODEL, messages=HELLO, toolConfig=TOOLS)
    events = list(r["stream"])
    start = next(e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e)
    assert start["name"] == "get_weather"
    args = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events if "contentBlockDelta" in e)
    assert json.loads(args) == {"city": "mock"}
    assert events[-2]["messageStop"]["stopReason"] == "tool_use"
    # Answering the tool use is accepted; a result for another id is not.
    c = client(mock)
    turn = {"role": "assistant", "content": [{"toolUse": {"toolUseId": start["toolUseId"], "name": "get_weather", "input": {"city": "mock"}}}]}
    ok = c.converse(modelId=MODEL, toolConfig=TOOLS | {"toolChoice": {"auto": {}}}, messages=HELLO + [turn, {"role": "user", "content": [
        {"toolResult": {"toolUseId": start["toolUseId"], "content": [{"text": "sunny"}]}}]}])
    assert ok["stopReason"] == "end_turn"
    with pytest.raises(ClientError) as e:
        c.converse(modelId=MODEL, toolConfig=TOOLS, messages=HELLO + [turn, {"role": "user", "content": [
            {"toolResult": {"toolUseId": "tooluse_other", "content": [{"text": "x"}]}}]}])
    assert e.value.response["Error"]["Code"] == "ValidationException"


@pytest.mark.parametrize("kwargs,code,status", [
    ({"secret": "wrong-secret"}, "InvalidSignatureException", 403),
    ({"key": "AKIDUNKNOWN"}, "UnrecognizedClientException", 403),
    ({"region": "eu-west-1"}, "InvalidSignatureException", 403),
    ({"key": "AKIDMOCKBEDROCK429", "secret": "mock-bedrock-secret-429"}, "ThrottlingException", 429),
])
def test_auth_and_key_failures(mock, kwargs, code, status):
    with pytest.raises(ClientError) as e:
        client(mock, **kwargs).converse(modelId=MODEL, messages=HELLO)
    assert e.value.response["Error"]["Code"] == code
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


@pytest.mark.parametrize("messages,model,needle", [
    ([{"role": "assistant", "content": [{"text": "a"}]}], MODEL, "start with a user message"),
    (HELLO + HELLO, MODEL, "alternate"),
    (HELLO, "anthropic.claude-0", "model identifier is invalid"),
    ([{"role": "user", "content": [{"toolResult": {"toolUseId": "x", "content": [{"text": "r"}]}}]}], MODEL, "toolConfig"),
])
def test_validation(mock, messages, model, needle):
    with pytest.raises(ClientError) as e:
        client(mock).converse(modelId=model, messages=messages)
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert needle in e.value.response["Error"]["Message"]


def _signed(mock, body: bytes):
    url = f"{mock.base}/model/{MODEL.replace(':', '%3A')}/converse"
    req = AWSRequest(method="POST", url=url, data=body, headers={"content-type": "application/json"})
    SigV4Auth(Credentials("AKIDMOCKBEDROCK1", "mock-bedrock-secret-1"), "bedrock", "us-east-1").add_auth(req)
    return req.prepare()


def _send(prepared, body: bytes):
    r = urllib.request.Request(prepared.url, data=body, method="POST", headers=dict(prepared.headers))
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_botocore_signature_accepted_and_tampered_body_rejected(mock):
    body = json.dumps({"messages": HELLO}).encode()
    p = _signed(mock, body)
    status, _, out = _send(p, body)
    assert status == 200, out
    tampered = json.dumps({"messages": [{"role": "user", "content": [{"text": "hello there WORLD"}]}]}).encode()
    status, headers, out = _send(p, tampered)
    assert status == 403
    assert headers["x-amzn-errortype"].startswith("InvalidSignatureException")
    assert b"signature we calculated does not match" in out


def test_stats_name_the_access_key(mock):
    mock.reset()
    client(mock).converse(modelId=MODEL, messages=HELLO)
    rec = mock.stats()["recent"][0]
    assert rec["key_id"] == "bedrock-1" and rec["model"] == MODEL
    assert rec["headers"]["authorization"] == "<redacted>"
    assert "mock-bedrock-secret-1" not in json.dumps(mock.stats())


def test_invoke_titan_embeddings(mock):
    c = client(mock)
    r = c.invoke_model(modelId="amazon.titan-embed-text-v2:0", body=json.dumps({"inputText": "abcdefgh", "dimensions": 256}),
                       contentType="application/json", accept="application/json")
    out = json.loads(r["body"].read())
    assert len(out["embedding"]) == 256 and out["inputTextTokenCount"] == 2
    with pytest.raises(ClientError) as e:
        c.invoke_model(modelId="amazon.titan-embed-text-v2:0", body=json.dumps({"text": "x"}))
    assert e.value.response["Error"]["Code"] == "ValidationException"


def test_error_event_mid_stream_raises(mock):
    from botocore.exceptions import EventStreamError
    c = client(mock)
    c.meta.events.register("before-sign.bedrock-runtime.ConverseStream",
                           lambda request, **_: request.headers.__setitem__("x-mock-error", "error-event"))
    r = c.converse_stream(modelId=MODEL, messages=HELLO)
    seen = []
    with pytest.raises(EventStreamError) as e:
        for ev in r["stream"]:
            seen.append(next(iter(ev)))
    assert e.value.response["Error"]["Code"] == "modelStreamErrorException"
    assert seen[0] == "messageStart" and "contentBlockDelta" in seen
