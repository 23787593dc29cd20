//! Not implemented yet.
use crate::app::{json_response, AuthFail, Ctx, ErrKind, KeyRt, Reply};

pub fn authenticate<'a>(ctx: &Ctx<'a>) -> Result<&'a KeyRt, AuthFail> {
    Err((error_for(ctx, ErrKind::Internal, ""), None))
}

pub fn error_for(_ctx: &Ctx<'_>, _k: ErrKind, _detail: &str) -> Reply {
    json_response(501, r#"{"error":"not implemented"}"#.to_string(), &[])
}

pub async fn generate(ctx: &Ctx<'_>, m: String, _s: bool) -> (Reply, Option<String>) {
    (error_for(ctx, ErrKind::Internal, ""), Some(m))
}
pub async fn embed(ctx: &Ctx<'_>, m: String, _s: bool) -> (Reply, Option<String>) {
    (error_for(ctx, ErrKind::Internal, ""), Some(m))
}
