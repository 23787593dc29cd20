#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! Bedrock Converse / ConverseStream shapes, one row per rule: the request,
//! the status, the exception type and the words of the answer. Rules:
//! botocore's bedrock-runtime service model and the errors quoted in
//! notes/bedrock.md.

use crate::common::*;
use serde_json::{json, Value};

const SECRET: &str = "mock-bedrock-secret-1";

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"text": text}]})
}

/// One user turn plus `extra` members.
fn req(extra: Value) -> Value {
    let mut v = json!({"messages": [user("hi")]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn tool(name: &str, schema: Value) -> Value {
    json!({"toolSpec": {"name": name, "description": "d", "inputSchema": {"json": schema}}})
}

fn tools(list: Value) -> Value {
    req(json!({"toolConfig": {"tools": list}}))
}

/// A tool call and its result, the result's content being `content`.
fn with_result(content: Value) -> Value {
    json!({"messages": [user("hi"),
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "f", "input": {}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": content}}]}],
        "toolConfig": {"tools": [tool("f", json!({"type": "object"}))]}})
}

struct Row {
    rule: &'static str,
    haiku: bool,
    op: &'static str,
    body: Value,
    status: u16,
    /// Exception type (`x-amzn-errortype` prefix) and words of the message.
    error: (&'static str, &'static str),
}

const OK: (&str, &str) = ("", "");

fn row(rule: &'static str, body: Value, error: (&'static str, &'static str)) -> Row {
    Row {
        rule,
        haiku: false,
        op: "converse",
        status: if error.0.is_empty() { 200 } else { 400 },
        body,
        error,
    }
}

fn haiku(mut r: Row) -> Row {
    r.haiku = true;
    r
}

fn stream(mut r: Row) -> Row {
    r.op = "converse-stream";
    r
}

const VE: &str = "ValidationException";

fn rows() -> Vec<Row> {
    vec![
        // Closed structures.
        row("unknown top-level member", req(json!({"temperature": 0.5})),
            (VE, "Unknown field 'temperature': the request shape has no such member.")),
        row("modelId is the URL's", req(json!({"modelId": "x"})), (VE, "Unknown field 'modelId'")),
        row("unknown Message member", json!({"messages": [{"role": "user", "content": [{"text": "a"}], "name": "u"}]}),
            (VE, "Unknown field 'name' at 'messages.1.member'")),
        row("unknown ContentBlock member", json!({"messages": [{"role": "user", "content": [{"text": "a"}, {"cache_control": {"type": "ephemeral"}}]}]}),
            (VE, "Unknown field 'cache_control' at 'messages.1.member.content.2.member'")),
        row("unknown ToolUseBlock member", json!({"messages": [user("a"),
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {}, "id": "t1"}}]}, user("b")],
            "toolConfig": {"tools": [tool("f", json!({"type": "object"}))]}}),
            (VE, "Unknown field 'id' at 'messages.2.member.content.1.member.toolUse'")),
        row("unknown ToolSpecification member", tools(json!([{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}, "input_schema": {}}}])),
            (VE, "Unknown field 'input_schema' at 'toolConfig.tools.1.member.toolSpec'")),
        row("unknown InferenceConfiguration member", req(json!({"inferenceConfig": {"topK": 5}})),
            (VE, "Unknown field 'topK' at 'inferenceConfig'")),
        row("GuardrailConfiguration has no streamProcessingMode", req(json!({"guardrailConfig": {"guardrailIdentifier": "g1", "guardrailVersion": "1", "streamProcessingMode": "async"}})),
            (VE, "Unknown field 'streamProcessingMode' at 'guardrailConfig'")),
        stream(row("GuardrailStreamConfiguration has streamProcessingMode", req(json!({"guardrailConfig": {"guardrailIdentifier": "g1", "guardrailVersion": "1", "streamProcessingMode": "async"}})), OK)),
        // Unions: exactly one member.
        row("a ContentBlock holds one member", json!({"messages": [{"role": "user", "content": [{"text": "a", "image": {"format": "png", "source": {"bytes": "AA=="}}}]}]}),
            (VE, "ContentBlock at 'messages.1.member.content.1.member' must contain exactly one member; found 2.")),
        row("an empty ContentBlock", json!({"messages": [{"role": "user", "content": [{}]}]}),
            (VE, "ContentBlock at 'messages.1.member.content.1.member' must contain exactly one member; found 0.")),
        row("a ToolChoice holds one member", req(json!({"toolConfig": {"tools": [tool("f", json!({"type": "object"}))], "toolChoice": {"auto": {}, "any": {}}}})),
            (VE, "ToolChoice at 'toolConfig.toolChoice' must contain exactly one member; found 2.")),
        row("an ImageSource holds one member", json!({"messages": [{"role": "user", "content": [{"image": {"format": "png", "source": {}}}]}]}),
            (VE, "ImageSource at 'messages.1.member.content.1.member.image.source' must contain exactly one member; found 0.")),
        // Enums, lengths, patterns, ranges: Coral's words, every violation.
        row("ConversationRole enum", json!({"messages": [{"role": "tool", "content": [{"text": "a"}]}]}),
            (VE, "1 validation error detected: Value 'tool' at 'messages.1.member.role' failed to satisfy constraint: Member must satisfy enum value set: [user, assistant, system]")),
        row("ImageFormat enum", json!({"messages": [{"role": "user", "content": [{"image": {"format": "bmp", "source": {"bytes": "AA=="}}}]}]}),
            (VE, "Value 'bmp' at 'messages.1.member.content.1.member.image.format' failed to satisfy constraint: Member must satisfy enum value set: [png, jpeg, gif, webp]")),
        row("ToolName pattern", tools(json!([tool("get.weather", json!({"type": "object"}))])),
            (VE, "1 validation error detected: Value 'get.weather' at 'toolConfig.tools.1.member.toolSpec.name' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+")),
        row("ToolName length", tools(json!([tool(&"a".repeat(65), json!({"type": "object"}))])),
            (VE, "at 'toolConfig.tools.1.member.toolSpec.name' failed to satisfy constraint: Member must have length less than or equal to 64")),
        row("an empty ToolName breaks two constraints", tools(json!([tool("", json!({"type": "object"}))])),
            (VE, "2 validation errors detected: Value '' at 'toolConfig.tools.1.member.toolSpec.name' failed to satisfy constraint: Member must have length greater than or equal to 1; Value '' at 'toolConfig.tools.1.member.toolSpec.name' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+")),
        row("ToolUseId pattern", json!({"messages": [user("a"),
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "call 1", "name": "f", "input": {}}}]}, user("b")],
            "toolConfig": {"tools": [tool("f", json!({"type": "object"}))]}}),
            (VE, "Value 'call 1' at 'messages.2.member.content.1.member.toolUse.toolUseId' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.:-]+")),
        row("a tool description is a NonEmptyString", tools(json!([{"toolSpec": {"name": "f", "description": "", "inputSchema": {"json": {"type": "object"}}}}])),
            (VE, "Value '' at 'toolConfig.tools.1.member.toolSpec.description' failed to satisfy constraint: Member must have length greater than or equal to 1")),
        row("system text is a NonEmptyString", req(json!({"system": [{"text": ""}]})),
            (VE, "Value '' at 'system.1.member.text' failed to satisfy constraint: Member must have length greater than or equal to 1")),
        row("temperature range", req(json!({"inferenceConfig": {"temperature": 1.5}})),
            (VE, "1 validation error detected: Value '1.5' at 'inferenceConfig.temperature' failed to satisfy constraint: Member must have value less than or equal to 1")),
        row("maxTokens at least 1", req(json!({"inferenceConfig": {"maxTokens": 0}})),
            (VE, "Value '0' at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1")),
        row("stop sequences are NonEmptyStrings", req(json!({"inferenceConfig": {"stopSequences": ["x", ""]}})),
            (VE, "Value '' at 'inferenceConfig.stopSequences.2.member' failed to satisfy constraint: Member must have length greater than or equal to 1")),
        row("toolConfig.tools has at least one tool", tools(json!([])),
            (VE, "at 'toolConfig.tools' failed to satisfy constraint: Member must have length greater than or equal to 1")),
        row("toolSpec.inputSchema is required", tools(json!([{"toolSpec": {"name": "f"}}])),
            (VE, "Value null at 'toolConfig.tools.1.member.toolSpec.inputSchema' failed to satisfy constraint: Member must not be null")),
        row("CacheTTL enum", req(json!({"system": [{"text": "s"}, {"cachePoint": {"type": "default", "ttl": "10m"}}]})),
            (VE, "Value '10m' at 'system.2.member.cachePoint.ttl' failed to satisfy constraint: Member must satisfy enum value set: [5m, 1h]")),
        row("requestMetadata key pattern", req(json!({"requestMetadata": {"bad!": "v"}})),
            (VE, "Value 'bad!' at 'requestMetadata.bad!' failed to satisfy constraint: Member must satisfy regular expression pattern")),
        row("GuardrailTrace enum", req(json!({"guardrailConfig": {"guardrailIdentifier": "g1", "guardrailVersion": "DRAFT", "trace": "on"}})),
            (VE, "Value 'on' at 'guardrailConfig.trace' failed to satisfy constraint: Member must satisfy enum value set: [enabled, disabled, enabled_full]")),
        // Wrong JSON types.
        row("text is a string", json!({"messages": [{"role": "user", "content": [{"text": 5}]}]}),
            ("SerializationException", "Expected a string at 'messages.1.member.content.1.member.text'")),
        row("content is a list", json!({"messages": [{"role": "user", "content": "hi"}]}),
            ("SerializationException", "Expected a list at 'messages.1.member.content'")),
        // Bedrock's own checks on Document members.
        row("inputSchema.json is an object", tools(json!([tool("f", json!("{}"))])),
            (VE, "The format of the value at toolConfig.tools.0.toolSpec.inputSchema.json is invalid. Provide a json object for the field and try again.")),
        row("inputSchema.json is of type object", tools(json!([tool("f", json!({"type": "string"}))])),
            (VE, "The value at toolConfig.tools.0.toolSpec.inputSchema.json.type must be one of the following: object.")),
        row("a toolResult json is an object", with_result(json!([{"json": ["a"]}])),
            (VE, "The format of the value at messages.2.content.0.toolResult.content.0.json is invalid. Provide a json object for the field and try again.")),
        row("a toolResult json object", with_result(json!([{"json": {"content": "x"}}, {"text": "y"}])), OK),
        // The model's limits and model fields.
        haiku(row("maxTokens above Claude 3 Haiku's limit", req(json!({"inferenceConfig": {"maxTokens": 4097}})),
            (VE, "The maximum tokens you requested exceeds the model limit of 4096. Try again with a maximum tokens value that is lower than 4096."))),
        haiku(row("maxTokens at Claude 3 Haiku's limit", req(json!({"inferenceConfig": {"maxTokens": 4096}})), OK)),
        row("maxTokens above Sonnet 4.5's limit", req(json!({"inferenceConfig": {"maxTokens": 64001}})),
            (VE, "exceeds the model limit of 64000")),
        haiku(row("thinking on a model that does not think", req(json!({"inferenceConfig": {"maxTokens": 4000},
            "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}})),
            (VE, "The model returned the following errors: thinking: Extra inputs are not permitted"))),
        row("a model field Converse already has", req(json!({"additionalModelRequestFields": {"system": "s"}})),
            (VE, "The additional field system conflicts with an existing field.")),
        row("an unknown model field", req(json!({"additionalModelRequestFields": {"guardrails": {}}})),
            (VE, "The model returned the following errors: guardrails: Extra inputs are not permitted")),
        row("temperature and topP together on Claude 4.5", req(json!({"inferenceConfig": {"temperature": 0.5, "topP": 0.9}})),
            (VE, "The model returned the following errors: `temperature` and `top_p` cannot both be specified for this model. Please use only one.")),
        haiku(row("temperature and topP together on Claude 3", req(json!({"inferenceConfig": {"temperature": 0.5, "topP": 0.9}})), OK)),
        // What the service model accepts.
        row("every member of ConverseRequest", json!({
            "messages": [user("hi"), {"role": "assistant", "content": [{"reasoningContent": {"reasoningText": {"text": "t", "signature": "s"}}}, {"text": "a"}]},
                {"role": "user", "content": [{"text": "again"}, {"document": {"format": "txt", "name": "notes", "source": {"text": "n"}}}, {"cachePoint": {"type": "default", "ttl": "1h"}}]}],
            "system": [{"text": "s"}, {"cachePoint": {"type": "default"}}],
            "inferenceConfig": {"maxTokens": 8000, "temperature": 0.2, "stopSequences": ["END"]},
            "toolConfig": {"tools": [tool("f", json!({"type": "object", "properties": {}})), {"cachePoint": {"type": "default"}}], "toolChoice": {"auto": {}}},
            "guardrailConfig": {"guardrailIdentifier": "abc123", "guardrailVersion": "DRAFT", "trace": "enabled"},
            "additionalModelRequestFields": {"top_k": 40, "thinking": {"type": "enabled", "budget_tokens": 2048}, "anthropic_beta": ["interleaved-thinking-2025-05-14"]},
            "additionalModelResponseFieldPaths": ["/stop_sequence"],
            "requestMetadata": {"team": "a/b"},
            "performanceConfig": {"latency": "standard"},
            "serviceTier": {"type": "default"},
            "outputConfig": {"effort": "high"},
            "promptVariables": {"x": {"text": "y"}}}), OK),
        row("a system turn between the others", json!({"messages": [user("a"), {"role": "system", "content": [{"text": "be brief"}]},
            {"role": "assistant", "content": [{"text": "b"}]}, user("c")]}), OK),
    ]
}

#[tokio::test]
async fn each_rule_answers_as_bedrock_does() {
    let app = app();
    for r in rows() {
        let model = if r.haiku { PATH } else { SONNET_PATH };
        let resp = bedrock_on(&app, model, r.op, &r.body.to_string(), SECRET).await;
        assert_eq!(resp.status, r.status, "{}: {}", r.rule, resp.text());
        if r.status == 200 {
            continue;
        }
        let ty = resp.header("x-amzn-errortype").unwrap_or("");
        assert!(ty.starts_with(r.error.0), "{}: {ty}", r.rule);
        let msg = resp.json()["message"].as_str().unwrap().to_string();
        assert!(msg.contains(r.error.1), "{}: {msg}", r.rule);
    }
}

const TITAN_PATH: &str = "/model/amazon.titan-embed-text-v2%3A0";

/// InvokeModel bodies, checked as Bedrock's JSON-schema validator answers
/// (notes/bedrock.md §3): (rule, model path, body, status, words).
fn invoke_rows() -> Vec<(&'static str, &'static str, Value, u16, &'static str)> {
    let claude = |extra: Value| {
        let mut v = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    vec![
        ("Titan: an extraneous key", TITAN_PATH, json!({"inputText": "x", "textGenerationConfig": {}}), 400,
            "Malformed input request: #: extraneous key [textGenerationConfig] is not permitted, please reformat your input and try again."),
        ("Titan: inputText required", TITAN_PATH, json!({"dimensions": 256}), 400,
            "Malformed input request: #: required key [inputText] not found, please reformat your input and try again."),
        ("Titan: normalize is a boolean", TITAN_PATH, json!({"inputText": "x", "normalize": "yes"}), 400,
            "#/normalize: expected type: Boolean, found: String"),
        ("Titan: dimensions 256, 512 or 1024", TITAN_PATH, json!({"inputText": "x", "dimensions": 300}), 400,
            "#/dimensions: 300 is not a valid enum value"),
        ("Titan: embeddingTypes float or binary", TITAN_PATH, json!({"inputText": "x", "embeddingTypes": ["int8"]}), 400,
            "#/embeddingTypes/0: int8 is not a valid enum value"),
        ("Titan: every member", TITAN_PATH, json!({"inputText": "x", "dimensions": 256, "normalize": true, "embeddingTypes": ["float", "binary"]}), 200, ""),
        ("Claude: model and stream are not body members", PATH, claude(json!({"model": "claude", "stream": true})), 400,
            "Malformed input request: #: extraneous key [model] is not permitted#: extraneous key [stream] is not permitted, please reformat your input and try again."),
        ("Claude: max_tokens required", PATH, json!({"anthropic_version": "bedrock-2023-05-31", "messages": [{"role": "user", "content": "hi"}]}), 400,
            "#: required key [max_tokens] not found"),
        ("Claude: anthropic_version", PATH, claude(json!({"anthropic_version": "2023-06-01"})), 400,
            "#/anthropic_version: 2023-06-01 is not a valid enum value"),
        ("Claude: nested keys", PATH, claude(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache": true}]}]})), 400,
            "#/messages/0/content/0: extraneous key [cache] is not permitted"),
        ("Claude: Converse-shaped tools", PATH, claude(json!({"tools": [{"toolSpec": {"name": "f"}}]})), 400,
            "#/tools/0: extraneous key [toolSpec] is not permitted"),
        ("Claude: max_tokens above Claude 3 Haiku's limit", PATH, claude(json!({"max_tokens": 4097})), 400,
            "exceeds the model limit of 4096"),
        ("Claude: thinking on a model that does not think", PATH, claude(json!({"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 1024}})), 400,
            "#: extraneous key [thinking] is not permitted"),
        ("Claude: context_management without its beta", SONNET_PATH, claude(json!({"context_management": {"edits": []}})), 400,
            "#: extraneous key [context_management] is not permitted"),
        ("Claude: context_management with its beta", SONNET_PATH,
            claude(json!({"anthropic_beta": ["context-management-2025-06-27"], "context_management": {"edits": []}})), 200, ""),
        ("Claude: a Messages API body", SONNET_PATH, claude(json!({"system": "s", "temperature": 0.5, "top_k": 5, "stop_sequences": ["END"],
            "max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"}})), 200, ""),
    ]
}

#[tokio::test]
async fn invoke_model_bodies_answer_as_bedrock_does() {
    let app = app();
    for (rule, model, body, status, says) in invoke_rows() {
        let r = bedrock_on(&app, model, "invoke", &body.to_string(), SECRET).await;
        assert_eq!(r.status, status, "{rule}: {}", r.text());
        if status == 200 {
            let v = r.json();
            if model == TITAN_PATH {
                assert!(v["embeddingsByType"]["binary"].is_array(), "{rule}: {v}");
            } else {
                assert_eq!(v["type"], "message", "{rule}: {v}");
            }
            continue;
        }
        assert!(r
            .header("x-amzn-errortype")
            .unwrap()
            .starts_with("ValidationException"));
        let msg = r.json()["message"].as_str().unwrap().to_string();
        assert!(msg.contains(says), "{rule}: {msg}");
    }
}
