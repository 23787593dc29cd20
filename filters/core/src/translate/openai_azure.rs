//! OpenAI → Azure OpenAI. Same body as OpenAI (checked and adjusted by
//! [`super::openai_openai::prepare`]); the path names the model's deployment
//! and carries `api-version`, the key goes in `api-key`. Answers pass through
//! (Azure's `prompt_filter_results` / `content_filter_results` are extra
//! fields OpenAI clients ignore), except that the stream's content-filter
//! chunk with `choices: []` and no usage, which Azure sends first, is dropped:
//! many OpenAI clients read `choices[0]` of every chunk.

use serde_json::Value;

use super::openai_openai::{error_message, parse_usage, prepare, OpenAiStream};
use super::{
    upstream_error, RequestCtx, ResponseCtx, StreamTranslator, Translated, Translator,
    UpstreamRequest,
};
use crate::config::{Key, Kind, Provider};
use crate::error::ApiError;

pub struct OpenAiAzure;

impl Translator for OpenAiAzure {
    fn kind(&self) -> Kind {
        Kind::Azure
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        let (bytes, suffix, stream, include_usage) = prepare(ctx, body)?;
        let deployment = ctx
            .provider
            .deployments
            .get(ctx.model)
            .map(String::as_str)
            .unwrap_or(ctx.model);
        Ok(UpstreamRequest {
            path: format!(
                "{}/deployments/{}{}?api-version={}",
                ctx.provider.base_path, deployment, suffix, ctx.provider.api_version
            ),
            body: bytes,
            stream,
            include_usage,
            json_mode: false,
            prompt_estimate: 0,
            embed_base64: false,
        })
    }

    fn auth_headers(
        &self,
        _provider: &Provider,
        key: &Key,
        _req: &UpstreamRequest,
        _now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        Ok(vec![("api-key", key.value.clone())])
    }

    fn passthrough(&self) -> bool {
        true
    }

    fn response(&self, _ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let usage = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("usage").and_then(parse_usage));
        Ok(Translated { body: None, usage })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        upstream_error(status, error_message(body))
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(OpenAiStream::new(ctx, true))
    }
}
