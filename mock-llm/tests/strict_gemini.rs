#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! Gemini's closed request messages, one row per rule: the request, the
//! status and the words of Google's answer. Rules: notes/gemini.md (the
//! v1beta protos and google-genai's Developer-API converters).

use crate::common::*;
use serde_json::{json, Value};

const KEY: (&str, &str) = ("x-goog-api-key", "mock-gemini-key-1");
const FLASH2: &str = "gemini-2.0-flash";
const FLASH25: &str = "gemini-2.5-flash";

fn user(text: &str) -> Value {
    json!({"role": "user", "parts": [{"text": text}]})
}

/// A request: one user turn plus `extra` members.
fn req(extra: Value) -> Value {
    let mut v = json!({"contents": [user("hi")]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// A request declaring one function whose parameters are `params`.
fn with_params(params: Value) -> Value {
    req(
        json!({"tools": [{"functionDeclarations": [{"name": "f", "description": "d", "parameters": params}]}]}),
    )
}

/// A turn pair where a function call and its response carry `call` and
/// `resp` members.
fn call_turns(call: Value, resp: Value) -> Value {
    let mut c = json!({"name": "f", "args": {}});
    let mut r = json!({"name": "f", "response": {"output": "x"}});
    for (k, x) in call.as_object().unwrap() {
        c[k] = x.clone();
    }
    for (k, x) in resp.as_object().unwrap() {
        r[k] = x.clone();
    }
    json!({"contents": [user("hi"), {"role": "model", "parts": [{"functionCall": c}]},
        {"role": "user", "parts": [{"functionResponse": r}]}],
        "tools": [{"functionDeclarations": [{"name": "f", "description": "d"}]}]})
}

struct Row {
    rule: &'static str,
    model: &'static str,
    method: &'static str,
    body: Value,
    status: u16,
    /// Words the error message holds (empty for a 200).
    says: &'static str,
}

fn gen(
    rule: &'static str,
    model: &'static str,
    body: Value,
    status: u16,
    says: &'static str,
) -> Row {
    Row {
        rule,
        model,
        method: "generateContent",
        body,
        status,
        says,
    }
}

fn rows() -> Vec<Row> {
    let props = |p: Value| with_params(json!({"type": "object", "properties": {"a": p}}));
    vec![
        // Closed messages: every unknown member, at every level.
        gen("unknown top-level member", FLASH2, req(json!({"bogus": 1})), 400,
            "Invalid JSON payload received. Unknown name \"bogus\": Cannot find field."),
        gen("model is the URL's, not a body member", FLASH2, req(json!({"model": "models/gemini-2.0-flash"})), 400,
            "Unknown name \"model\": Cannot find field."),
        gen("Vertex-only labels", FLASH2, req(json!({"labels": {"a": "b"}})), 400,
            "Unknown name \"labels\": Cannot find field."),
        gen("unknown Content member", FLASH2, json!({"contents": [{"role": "user", "parts": [{"text": "x"}], "name": "u"}]}), 400,
            "Unknown name \"name\" at 'contents[0]': Cannot find field."),
        gen("unknown Part member", FLASH2, json!({"contents": [{"role": "user", "parts": [{"text": "x", "cache_control": {}}]}]}), 400,
            "Unknown name \"cache_control\" at 'contents[0].parts[0]': Cannot find field."),
        gen("Vertex-only Blob.displayName", FLASH2,
            json!({"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA==", "displayName": "x"}}]}]}), 400,
            "Unknown name \"displayName\" at 'contents[0].parts[0].inline_data'"),
        gen("unknown FunctionCall member", FLASH2, call_turns(json!({"partialArgs": []}), json!({})), 400,
            "Unknown name \"partialArgs\" at 'contents[1].parts[0].function_call': Cannot find field."),
        gen("unknown FunctionResponse member", FLASH2, call_turns(json!({}), json!({"tool_call_id": "x"})), 400,
            "Unknown name \"tool_call_id\" at 'contents[2].parts[0].function_response': Cannot find field."),
        gen("FunctionResponse.response is a Struct", FLASH2, call_turns(json!({}), json!({"response": "text"})), 400,
            "Invalid value at 'contents[2].parts[0].function_response.response' (type.googleapis.com/google.protobuf.Struct), \"text\""),
        gen("FunctionCall and FunctionResponse with ids", FLASH2, call_turns(json!({"id": "c1"}), json!({"id": "c1"})), 200, ""),
        gen("unknown Tool member", FLASH2, req(json!({"tools": [{"function": {"name": "f"}}]})), 400,
            "Unknown name \"function\" at 'tools[0]': Cannot find field."),
        gen("unknown FunctionDeclaration member", FLASH2,
            req(json!({"tools": [{"functionDeclarations": [{"name": "f", "strict": true}]}]})), 400,
            "Unknown name \"strict\" at 'tools[0].function_declarations[0]': Cannot find field."),
        gen("unknown ToolConfig member", FLASH2, req(json!({"toolConfig": {"mode": "AUTO"}})), 400,
            "Unknown name \"mode\" at 'tool_config': Cannot find field."),
        gen("Vertex-only streamFunctionCallArguments", FLASH2,
            req(json!({"toolConfig": {"functionCallingConfig": {"mode": "AUTO", "streamFunctionCallArguments": true}}})), 400,
            "Unknown name \"streamFunctionCallArguments\" at 'tool_config.function_calling_config': Cannot find field."),
        gen("FunctionCallingConfig.mode enum", FLASH2,
            req(json!({"toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}})), 400,
            "Invalid value at 'tool_config.function_calling_config.mode' (type.googleapis.com/google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), \"SOMETIMES\""),
        gen("unknown GenerationConfig member", FLASH2, req(json!({"generationConfig": {"tools": []}})), 400,
            "Unknown name \"tools\" at 'generation_config': Cannot find field."),
        gen("unknown ThinkingConfig member", FLASH25,
            req(json!({"generationConfig": {"thinkingConfig": {"budget": 10}}})), 400,
            "Unknown name \"budget\" at 'generation_config.thinking_config': Cannot find field."),
        gen("unknown SafetySetting member", FLASH2,
            req(json!({"safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE", "method": "SEVERITY"}]})), 400,
            "Unknown name \"method\" at 'safety_settings[0]': Cannot find field."),
        gen("SafetySetting.category enum", FLASH2,
            req(json!({"safetySettings": [{"category": "HARASSMENT", "threshold": "BLOCK_NONE"}]})), 400,
            "Invalid value at 'safety_settings[0].category' (type.googleapis.com/google.ai.generativelanguage.v1beta.HarmCategory), \"HARASSMENT\""),
        gen("enums may be numbers", FLASH2,
            req(json!({"safetySettings": [{"category": 7, "threshold": 4}]})), 200, ""),
        gen("every unknown name is reported", FLASH2, req(json!({"a1": 1, "generationConfig": {"b2": 2}})), 400,
            "Unknown name \"a1\": Cannot find field.\nInvalid JSON payload received. Unknown name \"b2\" at 'generation_config': Cannot find field."),
        // Wrong JSON types.
        gen("an integer member takes no word", FLASH2, req(json!({"generationConfig": {"maxOutputTokens": "many"}})), 400,
            "Invalid value at 'generation_config.max_output_tokens' (TYPE_INT32), \"many\""),
        gen("integers may be strings", FLASH2, req(json!({"generationConfig": {"maxOutputTokens": "100", "topK": 40.0}})), 200, ""),
        gen("a text part is a string", FLASH2, json!({"contents": [{"role": "user", "parts": [{"text": 5}]}]}), 400,
            "Invalid value at 'contents[0].parts[0].text' (TYPE_STRING), 5"),
        gen("a message member is an object", FLASH2, req(json!({"generationConfig": "fast"})), 400,
            "Invalid value at 'generation_config' (type.googleapis.com/google.ai.generativelanguage.v1beta.GenerationConfig), \"fast\""),
        gen("a list where one value belongs", FLASH2, props(json!({"type": ["string", "null"]})), 400,
            "Unknown name \"type\" at 'tools[0].function_declarations[0].parameters.properties[0].value': Proto field is not repeating, cannot start list."),
        gen("snake_case spellings", FLASH2,
            json!({"contents": [user("hi")], "system_instruction": {"parts": [{"text": "s"}]}, "generation_config": {"max_output_tokens": 10, "stop_sequences": ["x"]}}), 200, ""),
        // Part's data oneof.
        gen("a part holds one data member", FLASH2,
            json!({"contents": [{"role": "user", "parts": [{"text": "x", "inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]}), 400,
            "Oneof field 'data' is already set."),
        gen("a thought signature beside text", FLASH25,
            json!({"contents": [user("hi"), {"role": "model", "parts": [{"text": "t", "thought": true, "thoughtSignature": "c2ln"}]}, user("again")]}), 200, ""),
        // Schema: exactly its 22 members inside parameters / responseSchema.
        gen("Schema refuses $schema", FLASH2, with_params(json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"})), 400,
            "Unknown name \"$schema\" at 'tools[0].function_declarations[0].parameters': Cannot find field."),
        gen("Schema refuses additionalProperties", FLASH2, with_params(json!({"type": "object", "additionalProperties": false})), 400,
            "Unknown name \"additionalProperties\" at 'tools[0].function_declarations[0].parameters': Cannot find field."),
        gen("Schema refuses const", FLASH2, props(json!({"const": "x"})), 400,
            "Unknown name \"const\" at 'tools[0].function_declarations[0].parameters.properties[0].value': Cannot find field."),
        gen("Schema refuses exclusiveMinimum", FLASH2, props(json!({"type": "number", "exclusiveMinimum": 0})), 400,
            "Unknown name \"exclusiveMinimum\" at 'tools[0].function_declarations[0].parameters.properties[0].value'"),
        gen("Schema refuses propertyNames", FLASH2, props(json!({"type": "object", "propertyNames": {"pattern": "^a"}})), 400,
            "Unknown name \"propertyNames\""),
        gen("Schema refuses oneOf, $ref, $defs", FLASH2, with_params(json!({"type": "object", "$defs": {}})), 400,
            "Unknown name \"$defs\" at 'tools[0].function_declarations[0].parameters'"),
        gen("Schema refuses a nested items keyword", FLASH2, props(json!({"type": "array", "items": {"type": "string", "uniqueItems": true}})), 400,
            "Unknown name \"uniqueItems\" at 'tools[0].function_declarations[0].parameters.properties[0].value.items'"),
        gen("Schema.type enum", FLASH2, props(json!({"type": "text"})), 400,
            "Invalid value at 'tools[0].function_declarations[0].parameters.properties[0].value.type' (type.googleapis.com/google.ai.generativelanguage.v1beta.Type), \"text\""),
        gen("Schema's 22 members, type without case", FLASH2, with_params(json!({
            "type": "object", "title": "t", "description": "d", "nullable": false, "required": ["a"],
            "propertyOrdering": ["a", "b"], "minProperties": 1, "maxProperties": "3", "example": {"a": "x"}, "default": null,
            "properties": {
                "a": {"type": "string", "format": "enum", "enum": ["x", "y"], "minLength": 1, "maxLength": 9, "pattern": "^[xy]$"},
                "b": {"type": "ARRAY", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 1, "maxItems": 2,
                      "anyOf": [{"type": "array"}]}}})), 200, ""),
        gen("parametersJsonSchema takes any JSON Schema", FLASH2,
            req(json!({"tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema":
                {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": false,
                 "properties": {"a": {"const": "x"}, "n": {"type": "integer", "exclusiveMinimum": 0}}, "propertyNames": {}}}]}]})), 200, ""),
        gen("parameters and parametersJsonSchema are exclusive", FLASH2,
            req(json!({"tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object"}, "parametersJsonSchema": {"type": "object"}}]}]})), 400,
            "tools[0].function_declarations[0]: parameters and parameters_json_schema are mutually exclusive"),
        gen("responseSchema is a Schema", FLASH2,
            req(json!({"generationConfig": {"responseMimeType": "application/json", "responseSchema": {"type": "object", "additionalProperties": false}}})), 400,
            "Unknown name \"additionalProperties\" at 'generation_config.response_schema': Cannot find field."),
        gen("responseSchema and responseJsonSchema are exclusive", FLASH2,
            req(json!({"generationConfig": {"responseMimeType": "application/json", "responseSchema": {"type": "object"}, "responseJsonSchema": {"type": "object"}}})), 400,
            "response_schema and response_json_schema are mutually exclusive"),
        gen("a response schema needs a JSON mime type", FLASH2,
            req(json!({"generationConfig": {"responseJsonSchema": {"type": "object"}}})), 400,
            "response_mime_type"),
        gen("responseJsonSchema takes any JSON Schema", FLASH2,
            req(json!({"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object", "additionalProperties": false, "$defs": {}}}})), 200, ""),
        // Output limits (notes §7) and thinking.
        gen("maxOutputTokens at gemini-2.0-flash's limit", FLASH2, req(json!({"generationConfig": {"maxOutputTokens": 8192}})), 200, ""),
        gen("maxOutputTokens above gemini-2.0-flash's limit", FLASH2, req(json!({"generationConfig": {"maxOutputTokens": 8193}})), 400,
            "Unable to submit request because it has a maxOutputTokens value of 8193 but the supported range is from 1 (inclusive) to 8193 (exclusive). Update the value and try again."),
        gen("maxOutputTokens above gemini-2.5-flash's limit", FLASH25, req(json!({"generationConfig": {"maxOutputTokens": 65537}})), 400,
            "value of 65537 but the supported range is from 1 (inclusive) to 65537 (exclusive)"),
        gen("maxOutputTokens below 1", FLASH25, req(json!({"generationConfig": {"maxOutputTokens": 0}})), 400,
            "value of 0 but the supported range is from 1 (inclusive)"),
        gen("thinking on a model that does not think", FLASH2,
            req(json!({"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}})), 400, "thinking_config is not supported."),
        gen("thinking on a model that thinks", FLASH25,
            req(json!({"generationConfig": {"thinkingConfig": {"thinkingBudget": -1, "includeThoughts": true}}})), 200, ""),
        gen("thinkingLevel enum", FLASH25,
            req(json!({"generationConfig": {"thinkingConfig": {"thinkingLevel": "EXTREME"}}})), 400,
            "(type.googleapis.com/google.ai.generativelanguage.v1beta.ThinkingConfig.ThinkingLevel), \"EXTREME\""),
        gen("thinking budget and level together", FLASH25,
            req(json!({"generationConfig": {"thinkingConfig": {"thinkingLevel": "LOW", "thinkingBudget": 10}}})), 400,
            "thinking_budget and thinking_level cannot both be set"),
        // Embeddings.
        Row { rule: "unknown EmbedContentRequest member", model: "text-embedding-004", method: "embedContent",
            body: json!({"content": {"parts": [{"text": "x"}]}, "mimeType": "text/plain"}), status: 400,
            says: "Unknown name \"mimeType\": Cannot find field." },
        Row { rule: "EmbedContentRequest.taskType enum", model: "text-embedding-004", method: "embedContent",
            body: json!({"content": {"parts": [{"text": "x"}]}, "taskType": "SEARCH"}), status: 400,
            says: "Invalid value at 'task_type' (type.googleapis.com/google.ai.generativelanguage.v1beta.TaskType), \"SEARCH\"" },
        Row { rule: "unknown batch request member", model: "text-embedding-004", method: "batchEmbedContents",
            body: json!({"requests": [{"model": "models/text-embedding-004", "content": {"parts": [{"text": "x"}]}, "autoTruncate": true}]}), status: 400,
            says: "Unknown name \"autoTruncate\" at 'requests[0]': Cannot find field." },
        Row { rule: "a batch request as google-genai sends it", model: "text-embedding-004", method: "batchEmbedContents",
            body: json!({"requests": [{"model": "models/text-embedding-004", "content": {"parts": [{"text": "x"}]}, "taskType": "RETRIEVAL_DOCUMENT", "title": "t", "outputDimensionality": 8}]}),
            status: 200, says: "" },
    ]
}

#[tokio::test]
async fn each_rule_answers_as_gemini_does() {
    let app = app();
    for row in rows() {
        let path = format!("/v1beta/models/{}:{}", row.model, row.method);
        let r = call(&app, "POST", &path, &[KEY], &row.body.to_string()).await;
        assert_eq!(r.status, row.status, "{}: {}", row.rule, r.text());
        if row.status != 200 {
            let v = r.json();
            assert_eq!(v["error"]["status"], "INVALID_ARGUMENT", "{}", row.rule);
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains(row.says), "{}: {msg}", row.rule);
        }
    }
}

#[tokio::test]
async fn unknown_names_carry_field_violations() {
    let body = req(json!({"bogus": 1, "generationConfig": {"tools": []}}));
    let r = call(
        &app(),
        "POST",
        "/v1beta/models/gemini-2.0-flash:generateContent",
        &[KEY],
        &body.to_string(),
    )
    .await;
    let v = r.json();
    assert_eq!(
        v["error"]["details"],
        json!([{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [
            {"description": "Invalid JSON payload received. Unknown name \"bogus\": Cannot find field."},
            {"field": "generation_config", "description": "Invalid JSON payload received. Unknown name \"tools\" at 'generation_config': Cannot find field."}]}])
    );
}
