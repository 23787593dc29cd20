//! OpenAI → Azure OpenAI. Same body as OpenAI (checked and adjusted by
//! [`super::openai_openai::prepare`]); the path names the model's deployment
//! and carries `api-version`, the key goes in `api-key`. Answers pass through
//! (Azure's `prompt_filter_results` / `content_filter_results` are extra
//! fields OpenAI clients ignore), except a stream's content-filter chunks
//! (empty `object`, `id` and `model`; no choices, or choices with only
//! filter results): they are dropped, since many OpenAI clients read
//! `choices[0]` of every chunk and check its `object`
//! (`openai_openai::azure_chunk`).

use serde_json::Value;

use super::openai_openai::{error_message, passthrough_response, prepare, upstream, OpenAiStream};
use super::{
    upstream_error, RequestCtx, ResponseCtx, StreamTranslator, Translated, Translator,
    UpstreamRequest,
};
use crate::config::{Api, Key, Kind, Provider, DEFAULT_AZURE_API_VERSION};
use crate::error::ApiError;

pub struct OpenAiAzure;

impl Translator for OpenAiAzure {
    fn kind(&self) -> Kind {
        Kind::Azure
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        let (bytes, suffix, stream, include_usage) = prepare(ctx, body)?;
        let (deployment, api_version) = match &ctx.provider.api {
            Api::Azure {
                deployments,
                api_version,
                ..
            } => (
                deployments
                    .get(ctx.model)
                    .map(String::as_str)
                    .unwrap_or(ctx.model),
                api_version.as_str(),
            ),
            _ => (ctx.model, DEFAULT_AZURE_API_VERSION),
        };
        let path = format!(
            "{}/deployments/{}{}?api-version={}",
            ctx.provider.base_path, deployment, suffix, api_version
        );
        Ok(upstream(path, bytes, stream, include_usage))
    }

    fn auth_headers(
        &self,
        _provider: &Provider,
        key: &Key,
        _req: &UpstreamRequest,
        _now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        Ok(vec![crate::credentials::api_key("api-key", key)])
    }

    fn passthrough(&self) -> bool {
        true
    }

    fn response(&self, _ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        Ok(passthrough_response(body))
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        upstream_error(status, error_message(body))
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(OpenAiStream::new(ctx, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::Endpoint;

    const STREAM: &str = "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null,\"content_filter_results\":{}}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"content_filter\"}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n\
data: [DONE]\n\n";

    fn run(include_usage: bool, split: usize) -> (String, Option<crate::translate::Usage>) {
        run_on(STREAM, include_usage, split)
    }

    fn run_on(
        stream: &str,
        include_usage: bool,
        split: usize,
    ) -> (String, Option<crate::translate::Usage>) {
        let ctx = ResponseCtx {
            endpoint: Endpoint::Chat,
            stream: true,
            include_usage,
            created: 0,
            json_mode: false,
            prompt_estimate: 0,
            embed_base64: false,
            model: String::new(),
        };
        let mut t = OpenAiAzure.stream(&ctx);
        let mut out = Vec::new();
        let (a, b) = stream.as_bytes().split_at(split);
        t.feed(a, &mut out);
        t.feed(b, &mut out);
        t.finish(&mut out);
        (String::from_utf8(out).unwrap(), t.usage())
    }

    #[test]
    fn every_content_filter_chunk_is_dropped_or_made_valid() {
        let stream = "data: {\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
data: {\"choices\":[{\"content_filter_offsets\":{\"check_offset\":0,\"start_offset\":0,\"end_offset\":2},\"content_filter_results\":{},\"finish_reason\":null,\"index\":0}],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\"}\n\n\
data: {\"choices\": [], \"id\": \"\", \"object\": \"\", \"prompt_filter_results\": []}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"},\"finish_reason\":null}],\"id\":\"\",\"model\":\"\",\"object\":\"\"}\n\n\
data: [DONE]\n\n";
        for i in 0..=stream.len() {
            let (out, _) = run_on(stream, true, i);
            let events: Vec<&str> = out.split("\n\n").filter(|e| !e.is_empty()).collect();
            assert_eq!(events.len(), 3, "split {i}: {out}");
            assert_eq!(events[2], "data: [DONE]");
            let texts: Vec<Value> = events[..2]
                .iter()
                .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
                .collect();
            for v in &texts {
                assert_eq!(v["object"], "chat.completion.chunk", "split {i}: {v}");
            }
            assert_eq!(texts[0]["choices"][0]["delta"]["content"], "Hi");
            assert_eq!(texts[1]["choices"][0]["delta"]["content"], "!");
        }
    }

    #[test]
    fn drops_the_prompt_filter_chunk_at_every_split() {
        let events: Vec<&str> = STREAM.split("\n\n").filter(|e| !e.is_empty()).collect();
        let with_usage: String = events[1..].iter().map(|e| format!("{e}\n\n")).collect();
        let without: String = events[1..]
            .iter()
            .filter(|e| !e.contains("\"usage\""))
            .map(|e| format!("{e}\n\n"))
            .collect();
        for i in 0..=STREAM.len() {
            let (out, usage) = run(true, i);
            assert_eq!(out, with_usage, "split {i}");
            assert_eq!(usage.map(|u| u.total()), Some(7));
            assert_eq!(run(false, i).0, without, "split {i}");
        }
    }
}
