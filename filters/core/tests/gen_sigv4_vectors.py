"""Generate SigV4 test vectors for the filter's signer with botocore, an
independent implementation. Writes tests/data/sigv4_vectors.json.

Run from the repository root:
    .venv/bin/python filters/core/tests/gen_sigv4_vectors.py

Each vector is a Bedrock runtime request (method, host, path as sent, body,
content-type, credentials, region, time) and the headers botocore's
SigV4Auth adds for it. The filter's test (tests/sigv4_botocore.rs) signs the
same input and must produce the same authorization header byte for byte.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from unittest import mock

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

OUT = Path(__file__).resolve().parent / "data" / "sigv4_vectors.json"

CASES = [
    # (name, region, path, body, access key, secret, token, unix seconds)
    ("converse", "us-east-1", "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
     '{"messages":[{"role":"user","content":[{"text":"hi"}]}]}',
     "AKIDMOCKBEDROCK1", "mock-bedrock-secret-1", None, 1_763_812_800),
    ("converse_stream", "us-east-1", "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
     '{"messages":[{"role":"user","content":[{"text":"tell me a story"}]}],"inferenceConfig":{"maxTokens":64}}',
     "AKIDMOCKBEDROCK1", "mock-bedrock-secret-1", None, 1_763_899_199),
    ("session_token", "eu-west-3", "/model/amazon.titan-embed-text-v2%3A0/invoke",
     '{"inputText":"h\u00e9llo"}',
     "ASIAEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "FQoGZXIvYXdzEXAMPLE//token+/=", 1_440_938_160),
    ("empty_body_leap_day", "ap-southeast-2", "/model/meta.llama3-8b-instruct-v1%3A0/converse", "",
     "AKIDEXAMPLE", "secret", None, 951_782_400),
    ("query_string", "us-west-2", "/model/x/converse?b=2&a=1&c=%2F",
     '{}', "AKIDEXAMPLE", "s3cr3t", None, 1_700_000_000),
]


def main() -> None:
    vectors = []
    for name, region, path, body, ak, sk, token, ts in CASES:
        host = f"bedrock-runtime.{region}.amazonaws.com"
        req = AWSRequest(method="POST", url=f"https://{host}{path}", data=body.encode(),
                         headers={"content-type": "application/json"})
        now = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).replace(tzinfo=None)
        with mock.patch.object(botocore.auth, "get_current_datetime", return_value=now):
            botocore.auth.SigV4Auth(Credentials(ak, sk, token), "bedrock", region).add_auth(req)
        vectors.append({
            "name": name, "method": "POST", "host": host, "path": path, "body": body,
            "content_type": "application/json", "access_key_id": ak, "secret": sk,
            "session_token": token, "region": region, "service": "bedrock", "now_ms": ts * 1000,
            "expected": {
                "authorization": req.headers["Authorization"],
                "x-amz-date": req.headers["X-Amz-Date"],
                **({"x-amz-security-token": req.headers["X-Amz-Security-Token"]} if token else {}),
            },
        })
    doc = {"generator": f"botocore {botocore.__version__} SigV4Auth", "vectors": vectors}
    OUT.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {len(vectors)} vectors to {OUT}")


if __name__ == "__main__":
    main()
