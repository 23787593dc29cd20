//! The Gemini API's request messages (v1beta), as Google's JSON parser
//! reads them: every message is closed (an unknown member is "Cannot find
//! field"), members are spelled in lowerCamelCase or in the proto's
//! snake_case, integers and floats may be strings, enums may be numbers.
//!
//! Source: googleapis `google/ai/generativelanguage/v1beta/{content,
//! generative_service,safety}.proto`, plus the newer members google-genai's
//! `_*_to_mldev` converters send to the Developer API (notes/gemini.md
//! §1–§5, §8). Members the SDK refuses for the Developer API (Vertex-only:
//! `labels`, `routingConfig`, `Blob.displayName`, `FunctionCall.partialArgs`,
//! `SafetySetting.method`, `Schema.additionalProperties`/`ref`/`defs`, …)
//! are not here, so they are unknown.

use crate::core::shape::{field2, list, Enum, Field, Msg, Ty, STR};

const fn e(name: &'static str, values: &'static [&'static str]) -> Enum {
    Enum {
        name,
        values,
        no_case: false,
    }
}

/// A member spelled the same in both forms.
const fn f(name: &'static str, ty: Ty) -> Field {
    field2(name, "", ty)
}

/// A member with its camelCase and snake_case spellings.
const fn g(camel: &'static str, snake: &'static str, ty: Ty) -> Field {
    field2(camel, snake, ty)
}

/// A required member.
const fn r(camel: &'static str, snake: &'static str, ty: Ty) -> Field {
    let mut x = field2(camel, snake, ty);
    x.required = true;
    x
}

static HARM_CATEGORY: Enum = e(
    "HarmCategory",
    &[
        "HARM_CATEGORY_UNSPECIFIED",
        "HARM_CATEGORY_DEROGATORY",
        "HARM_CATEGORY_TOXICITY",
        "HARM_CATEGORY_VIOLENCE",
        "HARM_CATEGORY_SEXUAL",
        "HARM_CATEGORY_MEDICAL",
        "HARM_CATEGORY_DANGEROUS",
        "HARM_CATEGORY_HARASSMENT",
        "HARM_CATEGORY_HATE_SPEECH",
        "HARM_CATEGORY_SEXUALLY_EXPLICIT",
        "HARM_CATEGORY_DANGEROUS_CONTENT",
        "HARM_CATEGORY_CIVIC_INTEGRITY",
        "HARM_CATEGORY_JAILBREAK",
    ],
);
static HARM_BLOCK_THRESHOLD: Enum = e(
    "SafetySetting.HarmBlockThreshold",
    &[
        "HARM_BLOCK_THRESHOLD_UNSPECIFIED",
        "BLOCK_LOW_AND_ABOVE",
        "BLOCK_MEDIUM_AND_ABOVE",
        "BLOCK_ONLY_HIGH",
        "BLOCK_NONE",
        "OFF",
    ],
);
/// `Schema.type`: the only enum the live API reads without case
/// (googleapis/js-genai#875).
pub static TYPE: Enum = Enum {
    name: "Type",
    values: &[
        "TYPE_UNSPECIFIED",
        "STRING",
        "NUMBER",
        "INTEGER",
        "BOOLEAN",
        "ARRAY",
        "OBJECT",
        "NULL",
    ],
    no_case: true,
};
static FC_MODE: Enum = e(
    "FunctionCallingConfig.Mode",
    &["MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"],
);
static DR_MODE: Enum = e(
    "DynamicRetrievalConfig.Mode",
    &["MODE_UNSPECIFIED", "MODE_DYNAMIC"],
);
static LANGUAGE: Enum = e(
    "ExecutableCode.Language",
    &["LANGUAGE_UNSPECIFIED", "PYTHON"],
);
static OUTCOME: Enum = e(
    "CodeExecutionResult.Outcome",
    &[
        "OUTCOME_UNSPECIFIED",
        "OUTCOME_OK",
        "OUTCOME_FAILED",
        "OUTCOME_DEADLINE_EXCEEDED",
    ],
);
static BEHAVIOR: Enum = e(
    "FunctionDeclaration.Behavior",
    &["UNSPECIFIED", "BLOCKING", "NON_BLOCKING"],
);
static SCHEDULING: Enum = e(
    "FunctionResponse.Scheduling",
    &["SCHEDULING_UNSPECIFIED", "SILENT", "WHEN_IDLE", "INTERRUPT"],
);
static MODALITY: Enum = e(
    "GenerationConfig.Modality",
    &["MODALITY_UNSPECIFIED", "TEXT", "IMAGE", "AUDIO"],
);
static MEDIA_RESOLUTION: Enum = e(
    "GenerationConfig.MediaResolution",
    &[
        "MEDIA_RESOLUTION_UNSPECIFIED",
        "MEDIA_RESOLUTION_LOW",
        "MEDIA_RESOLUTION_MEDIUM",
        "MEDIA_RESOLUTION_HIGH",
    ],
);
static PART_MEDIA_RESOLUTION: Enum = e(
    "Part.MediaResolution.Level",
    &[
        "MEDIA_RESOLUTION_UNSPECIFIED",
        "MEDIA_RESOLUTION_LOW",
        "MEDIA_RESOLUTION_MEDIUM",
        "MEDIA_RESOLUTION_HIGH",
        "MEDIA_RESOLUTION_ULTRA_HIGH",
    ],
);
static THINKING_LEVEL: Enum = e(
    "ThinkingConfig.ThinkingLevel",
    &[
        "THINKING_LEVEL_UNSPECIFIED",
        "MINIMAL",
        "LOW",
        "MEDIUM",
        "HIGH",
    ],
);
static TASK_TYPE: Enum = e(
    "TaskType",
    &[
        "TASK_TYPE_UNSPECIFIED",
        "RETRIEVAL_QUERY",
        "RETRIEVAL_DOCUMENT",
        "SEMANTIC_SIMILARITY",
        "CLASSIFICATION",
        "CLUSTERING",
        "QUESTION_ANSWERING",
        "FACT_VERIFICATION",
        "CODE_RETRIEVAL_QUERY",
    ],
);
static ENVIRONMENT: Enum = e(
    "ComputerUse.Environment",
    &["ENVIRONMENT_UNSPECIFIED", "ENVIRONMENT_BROWSER"],
);

static BLOB: Msg = Msg::new("Blob", &[g("mimeType", "mime_type", STR), f("data", STR)]);
static FILE_DATA: Msg = Msg::new(
    "FileData",
    &[
        g("mimeType", "mime_type", STR),
        r("fileUri", "file_uri", STR),
    ],
);
static VIDEO_METADATA: Msg = Msg::new(
    "VideoMetadata",
    &[
        g("startOffset", "start_offset", STR),
        g("endOffset", "end_offset", STR),
        f("fps", Ty::NUM),
    ],
);
static EXECUTABLE_CODE: Msg = Msg::new(
    "ExecutableCode",
    &[f("language", Ty::Enum(&LANGUAGE)), f("code", STR)],
);
static CODE_EXECUTION_RESULT: Msg = Msg::new(
    "CodeExecutionResult",
    &[f("outcome", Ty::Enum(&OUTCOME)), f("output", STR)],
);
static FUNCTION_CALL: Msg = Msg::new(
    "FunctionCall",
    &[f("id", STR), r("name", "", STR), f("args", Ty::Object)],
);
static FUNCTION_RESPONSE_PART: Msg = Msg::new(
    "FunctionResponsePart",
    &[
        g("inlineData", "inline_data", Ty::Msg(&BLOB)),
        g("fileData", "file_data", Ty::Msg(&FILE_DATA)),
    ],
);
static FUNCTION_RESPONSE: Msg = Msg::new(
    "FunctionResponse",
    &[
        f("id", STR),
        r("name", "", STR),
        r("response", "", Ty::Object),
        f("parts", list(&Ty::Msg(&FUNCTION_RESPONSE_PART))),
        g("willContinue", "will_continue", Ty::Bool),
        f("scheduling", Ty::Enum(&SCHEDULING)),
    ],
);
static PART_MEDIA: Msg = Msg::new(
    "Part.MediaResolution",
    &[
        f("level", Ty::Enum(&PART_MEDIA_RESOLUTION)),
        g("numTokens", "num_tokens", Ty::INT),
    ],
);

/// `Part`: the members of its `data` oneof (at most one may be set).
pub const PART_DATA: &[&str] = &[
    "text",
    "inlineData",
    "inline_data",
    "functionCall",
    "function_call",
    "functionResponse",
    "function_response",
    "fileData",
    "file_data",
    "executableCode",
    "executable_code",
    "codeExecutionResult",
    "code_execution_result",
    "toolCall",
    "tool_call",
    "toolResponse",
    "tool_response",
];

static PART: Msg = Msg::new(
    "Part",
    &[
        f("text", STR),
        g("inlineData", "inline_data", Ty::Msg(&BLOB)),
        g("functionCall", "function_call", Ty::Msg(&FUNCTION_CALL)),
        g(
            "functionResponse",
            "function_response",
            Ty::Msg(&FUNCTION_RESPONSE),
        ),
        g("fileData", "file_data", Ty::Msg(&FILE_DATA)),
        g(
            "executableCode",
            "executable_code",
            Ty::Msg(&EXECUTABLE_CODE),
        ),
        g(
            "codeExecutionResult",
            "code_execution_result",
            Ty::Msg(&CODE_EXECUTION_RESULT),
        ),
        g("videoMetadata", "video_metadata", Ty::Msg(&VIDEO_METADATA)),
        f("thought", Ty::Bool),
        g("thoughtSignature", "thought_signature", STR),
        g("partMetadata", "part_metadata", Ty::Object),
        g("mediaResolution", "media_resolution", Ty::Msg(&PART_MEDIA)),
        // Newer than the proto; sent by google-genai (`_Part_to_mldev`).
        g("toolCall", "tool_call", Ty::Object),
        g("toolResponse", "tool_response", Ty::Object),
        g("audioTranscription", "audio_transcription", Ty::Object),
    ],
);

pub static CONTENT: Msg = Msg::new(
    "Content",
    &[f("parts", list(&Ty::Msg(&PART))), f("role", STR)],
);

/// `Schema`: the OpenAPI subset `parameters`, `response` and
/// `responseSchema` take, exactly its 22 members.
pub static SCHEMA: Msg = Msg::new(
    "Schema",
    &[
        f("type", Ty::Enum(&TYPE)),
        f("format", STR),
        f("title", STR),
        f("description", STR),
        f("nullable", Ty::Bool),
        f("enum", list(&STR)),
        f("items", Ty::Msg(&SCHEMA)),
        g("maxItems", "max_items", Ty::INT),
        g("minItems", "min_items", Ty::INT),
        f(
            "properties",
            Ty::Map(&Ty::Msg(&SCHEMA), crate::core::shape::Len::ANY),
        ),
        f("required", list(&STR)),
        g("minProperties", "min_properties", Ty::INT),
        g("maxProperties", "max_properties", Ty::INT),
        f("minimum", Ty::NUM),
        f("maximum", Ty::NUM),
        g("minLength", "min_length", Ty::INT),
        g("maxLength", "max_length", Ty::INT),
        f("pattern", STR),
        f("example", Ty::Any),
        g("anyOf", "any_of", list(&Ty::Msg(&SCHEMA))),
        g("propertyOrdering", "property_ordering", list(&STR)),
        f("default", Ty::Any),
    ],
);

static FUNCTION_DECLARATION: Msg = Msg::new(
    "FunctionDeclaration",
    &[
        r("name", "", STR),
        f("description", STR),
        f("parameters", Ty::Msg(&SCHEMA)),
        g("parametersJsonSchema", "parameters_json_schema", Ty::Any),
        f("response", Ty::Msg(&SCHEMA)),
        g("responseJsonSchema", "response_json_schema", Ty::Any),
        f("behavior", Ty::Enum(&BEHAVIOR)),
    ],
);
static DYNAMIC_RETRIEVAL_CONFIG: Msg = Msg::new(
    "DynamicRetrievalConfig",
    &[
        f("mode", Ty::Enum(&DR_MODE)),
        g("dynamicThreshold", "dynamic_threshold", Ty::NUM),
    ],
);
static GOOGLE_SEARCH_RETRIEVAL: Msg = Msg::new(
    "GoogleSearchRetrieval",
    &[g(
        "dynamicRetrievalConfig",
        "dynamic_retrieval_config",
        Ty::Msg(&DYNAMIC_RETRIEVAL_CONFIG),
    )],
);
static EMPTY_CODE_EXECUTION: Msg = Msg::new("CodeExecution", &[]);
static EMPTY_URL_CONTEXT: Msg = Msg::new("UrlContext", &[]);
static INTERVAL: Msg = Msg::new(
    "Interval",
    &[
        g("startTime", "start_time", STR),
        g("endTime", "end_time", STR),
    ],
);
static GOOGLE_SEARCH: Msg = Msg::new(
    "Tool.GoogleSearch",
    &[
        g("timeRangeFilter", "time_range_filter", Ty::Msg(&INTERVAL)),
        g("searchTypes", "search_types", Ty::Object),
    ],
);
static COMPUTER_USE: Msg = Msg::new(
    "Tool.ComputerUse",
    &[
        f("environment", Ty::Enum(&ENVIRONMENT)),
        g(
            "excludedPredefinedFunctions",
            "excluded_predefined_functions",
            list(&STR),
        ),
        g(
            "disabledSafetyPolicies",
            "disabled_safety_policies",
            Ty::Any,
        ),
        g(
            "enablePromptInjectionDetection",
            "enable_prompt_injection_detection",
            Ty::Bool,
        ),
    ],
);
static GOOGLE_MAPS: Msg = Msg::new(
    "GoogleMaps",
    &[g("enableWidget", "enable_widget", Ty::Bool)],
);
static TOOL: Msg = Msg::new(
    "Tool",
    &[
        g(
            "functionDeclarations",
            "function_declarations",
            list(&Ty::Msg(&FUNCTION_DECLARATION)),
        ),
        g(
            "googleSearchRetrieval",
            "google_search_retrieval",
            Ty::Msg(&GOOGLE_SEARCH_RETRIEVAL),
        ),
        g(
            "codeExecution",
            "code_execution",
            Ty::Msg(&EMPTY_CODE_EXECUTION),
        ),
        g("googleSearch", "google_search", Ty::Msg(&GOOGLE_SEARCH)),
        g("computerUse", "computer_use", Ty::Msg(&COMPUTER_USE)),
        g("urlContext", "url_context", Ty::Msg(&EMPTY_URL_CONTEXT)),
        g("fileSearch", "file_search", Ty::Object),
        g("googleMaps", "google_maps", Ty::Msg(&GOOGLE_MAPS)),
        g("mcpServers", "mcp_servers", list(&Ty::Object)),
    ],
);
static FUNCTION_CALLING_CONFIG: Msg = Msg::new(
    "FunctionCallingConfig",
    &[
        f("mode", Ty::Enum(&FC_MODE)),
        g("allowedFunctionNames", "allowed_function_names", list(&STR)),
    ],
);
static LAT_LNG: Msg = Msg::new("LatLng", &[f("latitude", Ty::NUM), f("longitude", Ty::NUM)]);
static RETRIEVAL_CONFIG: Msg = Msg::new(
    "RetrievalConfig",
    &[
        g("latLng", "lat_lng", Ty::Msg(&LAT_LNG)),
        g("languageCode", "language_code", STR),
    ],
);
static TOOL_CONFIG: Msg = Msg::new(
    "ToolConfig",
    &[
        g(
            "functionCallingConfig",
            "function_calling_config",
            Ty::Msg(&FUNCTION_CALLING_CONFIG),
        ),
        g(
            "retrievalConfig",
            "retrieval_config",
            Ty::Msg(&RETRIEVAL_CONFIG),
        ),
        g(
            "includeServerSideToolInvocations",
            "include_server_side_tool_invocations",
            Ty::Bool,
        ),
    ],
);
static SAFETY_SETTING: Msg = Msg::new(
    "SafetySetting",
    &[
        f("category", Ty::Enum(&HARM_CATEGORY)),
        f("threshold", Ty::Enum(&HARM_BLOCK_THRESHOLD)),
    ],
);
static THINKING_CONFIG: Msg = Msg::new(
    "ThinkingConfig",
    &[
        g("includeThoughts", "include_thoughts", Ty::Bool),
        g("thinkingBudget", "thinking_budget", Ty::INT),
        g("thinkingLevel", "thinking_level", Ty::Enum(&THINKING_LEVEL)),
    ],
);
static IMAGE_CONFIG: Msg = Msg::new(
    "ImageConfig",
    &[
        g("aspectRatio", "aspect_ratio", STR),
        g("imageSize", "image_size", STR),
    ],
);
static GENERATION_CONFIG: Msg = Msg::new(
    "GenerationConfig",
    &[
        g("candidateCount", "candidate_count", Ty::INT),
        g("stopSequences", "stop_sequences", list(&STR)),
        g("maxOutputTokens", "max_output_tokens", Ty::INT),
        f("temperature", Ty::NUM),
        g("topP", "top_p", Ty::NUM),
        g("topK", "top_k", Ty::INT),
        f("seed", Ty::INT),
        g("responseMimeType", "response_mime_type", STR),
        g("responseSchema", "response_schema", Ty::Msg(&SCHEMA)),
        g("responseJsonSchema", "response_json_schema", Ty::Any),
        g("_responseJsonSchema", "", Ty::Any),
        g("presencePenalty", "presence_penalty", Ty::NUM),
        g("frequencyPenalty", "frequency_penalty", Ty::NUM),
        g("responseLogprobs", "response_logprobs", Ty::Bool),
        f("logprobs", Ty::INT),
        g(
            "enableEnhancedCivicAnswers",
            "enable_enhanced_civic_answers",
            Ty::Bool,
        ),
        g(
            "responseModalities",
            "response_modalities",
            list(&Ty::Enum(&MODALITY)),
        ),
        g("speechConfig", "speech_config", Ty::Object),
        g(
            "thinkingConfig",
            "thinking_config",
            Ty::Msg(&THINKING_CONFIG),
        ),
        g("imageConfig", "image_config", Ty::Msg(&IMAGE_CONFIG)),
        g(
            "mediaResolution",
            "media_resolution",
            Ty::Enum(&MEDIA_RESOLUTION),
        ),
        g(
            "audioTranscriptionConfig",
            "audio_transcription_config",
            Ty::Object,
        ),
    ],
);

/// `GenerateContentRequest` (generateContent and streamGenerateContent);
/// the model is the URL's.
pub static GENERATE: Msg = Msg::new(
    "GenerateContentRequest",
    &[
        f("contents", list(&Ty::Msg(&CONTENT))),
        g("systemInstruction", "system_instruction", Ty::Msg(&CONTENT)),
        f("tools", list(&Ty::Msg(&TOOL))),
        g("toolConfig", "tool_config", Ty::Msg(&TOOL_CONFIG)),
        g(
            "safetySettings",
            "safety_settings",
            list(&Ty::Msg(&SAFETY_SETTING)),
        ),
        g(
            "generationConfig",
            "generation_config",
            Ty::Msg(&GENERATION_CONFIG),
        ),
        g("cachedContent", "cached_content", STR),
        g("serviceTier", "service_tier", STR),
    ],
);

/// `EmbedContentRequest` (embedContent, and each of batchEmbedContents'
/// requests).
pub static EMBED: Msg = Msg::new(
    "EmbedContentRequest",
    &[
        f("model", STR),
        f("content", Ty::Msg(&CONTENT)),
        g("taskType", "task_type", Ty::Enum(&TASK_TYPE)),
        f("title", STR),
        g("outputDimensionality", "output_dimensionality", Ty::INT),
    ],
);

/// `BatchEmbedContentsRequest`.
pub static BATCH_EMBED: Msg = Msg::new(
    "BatchEmbedContentsRequest",
    &[f("requests", list(&Ty::Msg(&EMBED)))],
);
