//! The MCP part of the contract: the gateway's MCP routes (`/mcp/<server>`),
//! the header authz-service sends the filter with a key's tool allow-list,
//! tool patterns, and the JSON-RPC error body every part answers MCP
//! clients with (`{"jsonrpc":"2.0","id":…,"error":{"code","message","data"}}`).
//!
//! ```
//! use tollgate_wire::mcp;
//!
//! assert_eq!(mcp::server_of("/mcp/docs?x=1"), Some("docs"));
//! assert!(mcp::tools_allowed("docs/search*,weather/*;docs/*", "docs", "search_docs"));
//! assert!(!mcp::tools_allowed("docs/search*;weather/*", "docs", "search_docs"));
//! let body = mcp::error_body(Some(&serde_json::json!(7)), mcp::code::NOT_ALLOWED,
//!                            "no", Some("tool_not_allowed"), None);
//! assert_eq!(body, br#"{"jsonrpc":"2.0","id":7,"error":{"code":-31001,"message":"no","data":{"code":"tool_not_allowed"}}}"#);
//! ```

use serde::Serialize;
use serde_json::Value;

use crate::{model_matches, valid_name};

/// The gateway's MCP routes: `/mcp/<server>`, the server a name of the
/// config ([`valid_name`]).
pub const PATH_PREFIX: &str = "/mcp/";

/// Every MCP server behind one endpoint: tools are named
/// `<server>`[`SEPARATOR`]`<tool>` there.
pub const AGGREGATE_PATH: &str = "/mcp";

/// Between a server's name and its tool's on [`AGGREGATE_PATH`] (Envoy's
/// MCP router's).
pub const SEPARATOR: &str = "__";

/// Is `path` (any query string) the aggregate endpoint?
pub fn is_aggregate(path: &str) -> bool {
    path.split('?').next() == Some(AGGREGATE_PATH)
}

/// Is `path` one of the MCP routes (a server's or the aggregate)?
pub fn is_mcp_path(path: &str) -> bool {
    path.starts_with(PATH_PREFIX) || is_aggregate(path)
}

/// `<server>__<tool>` of the aggregate endpoint as (server, tool), when
/// the server part is a valid name and the tool part is not empty.
pub fn split_prefixed(name: &str) -> Option<(&str, &str)> {
    let (server, tool) = name.split_once(SEPARATOR)?;
    (valid_name(server) && !tool.is_empty()).then_some((server, tool))
}

/// The dynamic metadata namespace Envoy's MCP filter writes (`method`,
/// `id`, `params.name`) and ext_authz forwards to authz-service.
pub const METADATA_NAMESPACE: &str = "envoy.filters.http.mcp";

/// authz-service → filter: the tool patterns of the key (and its tenant) on
/// this server. Groups are separated by `;`, patterns in a group by `,`; a
/// tool is allowed when every group has a pattern matching `server/tool`
/// ([`tools_allowed`]). Always set on MCP routes (empty: no tool), so a
/// client cannot forge it.
pub const TOOLS_HEADER: &str = "x-tollgate-mcp-tools";

/// authz-service → filter: the request's JSON-RPC method (empty without
/// one), as Envoy's MCP filter read it; `other` when it is not a plain
/// header value.
pub const METHOD_HEADER: &str = "x-tollgate-mcp-method";

/// authz-service → filter: the tool of a `tools/call` (empty otherwise);
/// `other` when it is not a plain header value.
pub const TOOL_HEADER: &str = "x-tollgate-mcp-tool";

/// A value for [`METHOD_HEADER`] or [`TOOL_HEADER`]: itself when it is at
/// most 128 bytes of visible ASCII, else `other`.
pub fn header_safe(v: &str) -> &str {
    if v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()) {
        v
    } else {
        "other"
    }
}

/// The server of an MCP route's path (`/mcp/<server>`, `/mcp/<server>/…`,
/// any query string), when it is a valid name.
pub fn server_of(path: &str) -> Option<&str> {
    let rest = path.split('?').next()?.strip_prefix(PATH_PREFIX)?;
    let server = rest.split('/').next()?;
    valid_name(server).then_some(server)
}

/// Does one pattern allow `server/tool`? Patterns are those of models:
/// `*`, an exact `server/tool`, or a prefix ending in `*` (`docs/*`,
/// `docs/search_*`).
pub fn tool_matches(pattern: &str, server: &str, tool: &str) -> bool {
    let full_len = server.len() + 1 + tool.len();
    let mut full = String::with_capacity(full_len);
    full.push_str(server);
    full.push('/');
    full.push_str(tool);
    model_matches(pattern, &full)
}

/// Does a pattern allow anything on `server` (so its requests other than
/// tool calls pass)?
pub fn server_matches(pattern: &str, server: &str) -> bool {
    match pattern.strip_suffix('*') {
        // `*`, `docs*`, `docs/*`, `docs/search_*`: some tool of `docs` matches
        // when the prefix is a prefix of "docs/" or starts with it.
        Some(prefix) => {
            let with_slash = format!("{server}/");
            with_slash.starts_with(prefix) || prefix.starts_with(&with_slash)
        }
        None => pattern
            .split_once('/')
            .is_some_and(|(s, t)| s == server && !t.is_empty()),
    }
}

/// Is `tool` of `server` allowed by a [`TOOLS_HEADER`] value?
pub fn tools_allowed(header: &str, server: &str, tool: &str) -> bool {
    groups(header).all(|mut g| g.any(|p| tool_matches(p, server, tool)))
}

/// The groups of a [`TOOLS_HEADER`] value, each an iterator of its patterns.
fn groups(header: &str) -> impl Iterator<Item = impl Iterator<Item = &str>> {
    header
        .split(';')
        .map(|g| g.split(',').map(str::trim).filter(|p| !p.is_empty()))
}

/// JSON-RPC error codes the gateway answers with: JSON-RPC's own, and for
/// the gateway's decisions codes outside JSON-RPC's reserved range
/// (-32768..-32000), as MCP asks of codes it does not define. The reason
/// is also in `error.data.code` as a string (`tool_not_allowed`, …).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The virtual key is missing or unknown (HTTP 401).
    pub const UNAUTHENTICATED: i64 = -31000;
    /// The key may not use this server or tool (HTTP 403).
    pub const NOT_ALLOWED: i64 = -31001;
    /// A calls-per-minute (or per-day) limit is reached (HTTP 429).
    pub const RATE_LIMITED: i64 = -31002;
    /// A money budget has no room for the call's price (HTTP 429).
    pub const BUDGET_EXCEEDED: i64 = -31003;
    /// The gateway or the server cannot answer now (HTTP 502/503/504).
    pub const UNAVAILABLE: i64 = -31004;
}

/// A JSON-RPC error response: `id` as the request had it (`None`: null,
/// for a request whose id could not be read), `data.code` the gateway's
/// reason when given, and `extra` more fields of `data`.
pub fn error_body(
    id: Option<&Value>,
    code: i64,
    message: &str,
    reason: Option<&str>,
    extra: Option<Value>,
) -> Vec<u8> {
    let mut data = serde_json::Map::new();
    if let Some(r) = reason {
        data.insert("code".into(), Value::String(r.into()));
    }
    if let Some(Value::Object(more)) = extra {
        data.extend(more);
    }
    let body = Response {
        jsonrpc: "2.0",
        id: id.unwrap_or(&Value::Null),
        error: ErrorObject {
            code,
            message,
            data: (!data.is_empty()).then_some(data),
        },
    };
    serde_json::to_vec(&body).unwrap_or_else(|_| {
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error"}}"#
            .to_vec()
    })
}

/// A JSON-RPC error response, fields in the order JSON-RPC writes them.
#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<serde_json::Map<String, Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn servers_of_paths() {
        assert_eq!(server_of("/mcp/docs"), Some("docs"));
        assert_eq!(server_of("/mcp/docs/"), Some("docs"));
        assert_eq!(server_of("/mcp/docs/x/y?z"), Some("docs"));
        assert_eq!(server_of("/mcp/"), None);
        assert_eq!(server_of("/mcp"), None);
        assert_eq!(server_of("/mcp/d%6Fcs"), None);
        assert_eq!(server_of("/v1/chat/completions"), None);
    }

    #[test]
    fn patterns_of_servers_and_tools() {
        assert!(tool_matches("*", "docs", "x"));
        assert!(tool_matches("docs/*", "docs", "x"));
        assert!(!tool_matches("docs/*", "docsx", "x"));
        assert!(tool_matches("docs/search_*", "docs", "search_docs"));
        assert!(!tool_matches("docs/search", "docs", "search_docs"));
        for (p, s, want) in [
            ("*", "docs", true),
            ("docs/*", "docs", true),
            ("docs*", "docs", true),
            ("docs/search*", "docs", true),
            ("doc*", "docs", true),
            ("docs/search", "docs", true),
            ("docs/", "docs", false),
            ("docsx/*", "docs", false),
            ("weather/*", "docs", false),
            ("docs", "docs", false),
        ] {
            assert_eq!(server_matches(p, s), want, "{p} on {s}");
        }
    }

    #[test]
    fn the_aggregate_endpoint() {
        assert!(is_aggregate("/mcp") && is_aggregate("/mcp?x=1"));
        assert!(!is_aggregate("/mcp/demo") && !is_aggregate("/mcpx"));
        assert!(is_mcp_path("/mcp") && is_mcp_path("/mcp/demo") && !is_mcp_path("/v1/models"));
        assert_eq!(
            split_prefixed("demo__get_weather"),
            Some(("demo", "get_weather"))
        );
        assert_eq!(split_prefixed("demo__a__b"), Some(("demo", "a__b")));
        assert_eq!(split_prefixed("get_weather"), None);
        assert_eq!(split_prefixed("__x"), None);
        assert_eq!(split_prefixed("demo__"), None);
    }

    #[test]
    fn every_group_must_allow() {
        assert!(tools_allowed("docs/*", "docs", "a"));
        assert!(tools_allowed("weather/*, docs/a", "docs", "a"));
        assert!(!tools_allowed("docs/*;docs/b", "docs", "a"));
        assert!(!tools_allowed("", "docs", "a"));
        assert!(!tools_allowed(";", "docs", "a"));
    }

    #[test]
    fn error_bodies() {
        let b = error_body(None, code::PARSE_ERROR, "bad", None, None);
        assert_eq!(
            b,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#
        );
        let b = error_body(
            Some(&json!("a")),
            code::RATE_LIMITED,
            "slow down",
            Some("rate_limit_exceeded"),
            Some(json!({"retry_after": 3})),
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["id"], "a");
        assert_eq!(v["error"]["data"]["retry_after"], 3);
        assert_eq!(v["error"]["data"]["code"], "rate_limit_exceeded");
    }
}
