//! The MCP routes (`/mcp/<server>`): what the filter does for a request
//! Envoy's MCP filter parsed and authz-service admitted (the key, the
//! server, the tool, its limits and price are theirs, see
//! docs/architecture.md, "MCP servers").
//!
//! - Request: the gateway's `x-tollgate-*` headers are read and removed,
//!   the call's facts (tenant, key id, server, method, tool) become filter
//!   state for the access log and the tracer; nothing is buffered.
//! - Response of `tools/list`: only the tools the key may call are kept
//!   (JSON answers buffered whole; SSE answers event by event).
//! - Response of `tools/call`: read as it passes for its outcome (`ok`,
//!   `tool_error` when the result says `isError`, `error` for a JSON-RPC
//!   error, `http_<status>`, `gateway_error` for Envoy's own reply).
//! - End: the call counted by outcome, and its duration, per tenant, key,
//!   server and tool.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde_json::Value;
use tollgate_wire::header::{CACHE_BREAKPOINTS, KEY_ID, MODELS, RESERVED, TENANT};
use tollgate_wire::mcp::{
    is_aggregate, server_of, split_prefixed, tools_allowed, METHOD_HEADER, TOOLS_HEADER,
    TOOL_HEADER,
};

use crate::codec::sse::{Event, SseParser};
use crate::host::{Action, Host, MetricKind};
use crate::metrics::{label, MAX_SERIES, OTHER};
use crate::plan::metric_safe;

/// Filter state names (Envoy: `wasm.<name>`) of an MCP request.
pub mod property {
    pub const SERVER: &str = "tollgate.mcp_server";
    pub const METHOD: &str = "tollgate.mcp_method";
    pub const TOOL: &str = "tollgate.mcp_tool";
    pub const OUTCOME: &str = "tollgate.mcp_outcome";
}

/// Longest answer read for a tool call's outcome, or buffered to filter a
/// tool list: past it the answer passes untouched (`outcome` unknown).
pub const MAX_READ: usize = 4 * 1024 * 1024;

/// Is this request one of the MCP routes' (a server's, or every server's
/// behind `/mcp`)?
pub use tollgate_wire::mcp::is_mcp_path;

/// One worker's MCP metric ids, by name.
#[derive(Debug, Default)]
pub struct McpMetrics {
    ids: HashMap<String, Option<u32>>,
}

impl McpMetrics {
    fn id(&mut self, h: &mut dyn Host, kind: MetricKind, name: String) -> Option<u32> {
        if let Some(id) = self.ids.get(&name) {
            return *id;
        }
        let name = if self.ids.len() >= MAX_SERIES {
            // Bounded: past the cap, new series count under other labels.
            let tail = name.rsplit('.').take(2).collect::<Vec<_>>();
            format!(
                "tollgate_mcp.tenant.{OTHER}.key.{OTHER}.server.{OTHER}.tool.{OTHER}.{}",
                tail.iter().rev().cloned().collect::<Vec<_>>().join(".")
            )
        } else {
            name
        };
        let id = h.define_metric(kind, &name);
        self.ids.insert(name, id);
        id
    }
}

/// How the answer is read.
enum Read {
    /// Passed on untouched.
    None,
    /// `tools/list` as JSON: buffered, then filtered.
    ListJson,
    /// `tools/list` as SSE: each event filtered.
    ListSse(SseParser),
    /// `tools/call` as JSON: read for its outcome.
    CallJson(Vec<u8>),
    /// `tools/call` as SSE: read for its outcome.
    CallSse(SseParser),
}

/// One MCP request.
pub struct Exchange {
    metrics: Rc<RefCell<McpMetrics>>,
    tenant: Option<String>,
    key_id: Option<String>,
    server: String,
    method: String,
    tool: String,
    tools: String,
    /// The aggregate endpoint (`/mcp`): tools are `<server>__<tool>`.
    aggregate: bool,
    started_ms: u64,
    read: Read,
    outcome: Option<String>,
    logged: bool,
}

/// Headers authz-service sets for the filter: never sent on.
const GATEWAY_HEADERS: [&str; 8] = [
    TENANT,
    KEY_ID,
    MODELS,
    RESERVED,
    CACHE_BREAKPOINTS,
    TOOLS_HEADER,
    METHOD_HEADER,
    TOOL_HEADER,
];

impl Exchange {
    pub fn new(metrics: Rc<RefCell<McpMetrics>>) -> Exchange {
        Exchange {
            metrics,
            tenant: None,
            key_id: None,
            server: String::new(),
            method: String::new(),
            tool: String::new(),
            tools: String::new(),
            aggregate: false,
            started_ms: 0,
            read: Read::None,
            outcome: None,
            logged: false,
        }
    }

    pub fn on_request_headers(&mut self, h: &mut dyn Host) -> Action {
        let all = h.request_headers().unwrap_or_default();
        // authz-service writes `-` for none (never an empty value).
        let get = |name: &str| {
            all.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| if v == "-" { String::new() } else { v.clone() })
        };
        self.started_ms = h.now_ms();
        let path = get(":path").unwrap_or_default();
        self.aggregate = is_aggregate(&path);
        self.tenant = get(TENANT);
        self.key_id = get(KEY_ID);
        self.tools = get(TOOLS_HEADER).unwrap_or_default();
        self.method = get(METHOD_HEADER).unwrap_or_default();
        self.tool = get(TOOL_HEADER).unwrap_or_default();
        self.server = if self.aggregate {
            // Its tools name their server: `demo__get_weather`.
            match split_prefixed(&self.tool) {
                Some((s, t)) => {
                    let (s, t) = (s.to_string(), t.to_string());
                    self.tool = t;
                    s
                }
                None => "*".to_string(),
            }
        } else {
            server_of(&path).unwrap_or(OTHER).to_string()
        };
        for name in GATEWAY_HEADERS {
            // The aggregate's MCP router binds its sessions to the key id.
            if get(name).is_some() && !(self.aggregate && name == KEY_ID) {
                h.set_request_header(name, None);
            }
        }
        h.set_property(
            crate::metrics::property::TENANT,
            label(self.tenant.as_deref()).as_bytes(),
        );
        h.set_property(
            crate::metrics::property::KEY_ID,
            label(self.key_id.as_deref()).as_bytes(),
        );
        h.set_property(property::SERVER, self.server.as_bytes());
        if !self.method.is_empty() {
            h.set_property(property::METHOD, self.method.as_bytes());
        }
        if !self.tool.is_empty() {
            h.set_property(property::TOOL, self.tool.as_bytes());
        }
        if self.method == "tools/call" {
            // gen_ai.operation.name of OpenTelemetry's MCP conventions.
            h.set_property(crate::metrics::property::OPERATION, b"execute_tool");
        }
        Action::Continue
    }

    pub fn on_response_headers(&mut self, h: &mut dyn Host, end_of_stream: bool) -> Action {
        let status: u16 = h
            .response_header(":status")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if !(200..300).contains(&status) {
            let o = if h.response_from_upstream() {
                format!("http_{status}")
            } else {
                "gateway_error".into()
            };
            h.set_property(property::OUTCOME, o.as_bytes());
            self.outcome = Some(o);
            return Action::Continue;
        }
        let ctype = h.response_header("content-type").unwrap_or_default();
        let sse = ctype.starts_with("text/event-stream");
        let json = ctype.starts_with("application/json");
        self.read = match self.method.as_str() {
            "tools/list" if json && !end_of_stream => {
                h.set_response_header("content-length", None);
                Read::ListJson
            }
            "tools/list" if sse => Read::ListSse(SseParser::default()),
            "tools/call" if json => Read::CallJson(Vec::new()),
            "tools/call" if sse => Read::CallSse(SseParser::default()),
            _ => Read::None,
        };
        if self.method != "tools/call" {
            self.outcome = Some("ok".into());
            h.set_property(property::OUTCOME, b"ok");
        }
        match self.read {
            Read::ListJson => Action::Pause,
            _ => Action::Continue,
        }
    }

    pub fn on_response_body(
        &mut self,
        h: &mut dyn Host,
        size: usize,
        end_of_stream: bool,
    ) -> Action {
        let known = self.outcome.is_some();
        let action = self.read_body(h, size, end_of_stream);
        if let (false, Some(o)) = (known, &self.outcome) {
            h.set_property(property::OUTCOME, o.as_bytes());
        }
        action
    }

    fn read_body(&mut self, h: &mut dyn Host, size: usize, end_of_stream: bool) -> Action {
        match &mut self.read {
            Read::None => Action::Continue,
            Read::ListJson => {
                if !end_of_stream {
                    if size > MAX_READ {
                        self.read = Read::None;
                        return Action::Continue;
                    }
                    return Action::Pause;
                }
                let body = h.response_body(size).unwrap_or_default();
                let server = if self.aggregate {
                    ""
                } else {
                    self.server.as_str()
                };
                if let Some(out) = filter_list(&body, &self.tools, server) {
                    h.set_response_body(size, &out);
                }
                Action::Continue
            }
            Read::ListSse(parser) => {
                let chunk = h.response_body(size).unwrap_or_default();
                let mut out = Vec::with_capacity(chunk.len());
                let server = if self.aggregate {
                    ""
                } else {
                    self.server.as_str()
                };
                let tools = &self.tools;
                let mut emit = |e: Event| write_event(&mut out, &e, tools, server);
                let ok = parser.feed(&chunk, &mut emit).is_ok()
                    && (!end_of_stream || parser.finish(&mut emit).is_ok());
                if !ok {
                    // Not a readable stream: the rest passes as it is.
                    self.read = Read::None;
                    return Action::Continue;
                }
                if out != chunk {
                    h.set_response_body(size, &out);
                }
                Action::Continue
            }
            Read::CallJson(seen) => {
                let chunk = h.response_body(size).unwrap_or_default();
                if seen.len() + chunk.len() <= MAX_READ {
                    seen.extend_from_slice(&chunk);
                }
                if end_of_stream {
                    self.outcome = Some(outcome_of(seen).unwrap_or("unknown").into());
                }
                Action::Continue
            }
            Read::CallSse(parser) => {
                let chunk = h.response_body(size).unwrap_or_default();
                let mut found = None;
                let mut look = |e: Event| {
                    if found.is_none() {
                        found = outcome_of(e.data.as_bytes());
                    }
                };
                let _ = parser.feed(&chunk, &mut look);
                if let Some(o) = found {
                    self.outcome = Some(o.into());
                    self.read = Read::None;
                }
                Action::Continue
            }
        }
    }

    /// The call counted by outcome, and its duration (tool calls); the
    /// outcome as filter state (every MCP request; also set as soon as it
    /// is known, before Envoy ends the request's span).
    pub fn on_log(&mut self, h: &mut dyn Host) {
        if self.logged {
            return;
        }
        self.logged = true;
        let outcome = self.outcome.clone().unwrap_or_else(|| "no_response".into());
        h.set_property(property::OUTCOME, outcome.as_bytes());
        if self.method != "tools/call" {
            return;
        }
        let tool = if self.tool.is_empty() {
            OTHER
        } else {
            &self.tool
        };
        let prefix = format!(
            "tollgate_mcp.tenant.{}.key.{}.server.{}.tool.{}",
            metric_safe(label(self.tenant.as_deref())),
            metric_safe(label(self.key_id.as_deref())),
            metric_safe(&self.server),
            metric_safe(tool),
        );
        let ms = h.now_ms().saturating_sub(self.started_ms);
        let mut m = self.metrics.borrow_mut();
        let calls = m.id(
            h,
            MetricKind::Counter,
            format!("{prefix}.calls.{}", metric_safe(&outcome)),
        );
        let duration = m.id(h, MetricKind::Histogram, format!("{prefix}.duration_ms"));
        crate::metrics::record(h, MetricKind::Counter, calls, 1);
        crate::metrics::record(h, MetricKind::Histogram, duration, ms);
    }
}

/// The outcome of a JSON-RPC response: `error`, `tool_error` (a result
/// with `isError: true`), `ok`; `None` for anything else (a notification).
pub fn outcome_of(message: &[u8]) -> Option<&'static str> {
    let v: Value = serde_json::from_slice(message).ok()?;
    if v.get("error").is_some() {
        return Some("error");
    }
    let result = v.get("result")?;
    Some(if result.get("isError") == Some(&Value::Bool(true)) {
        "tool_error"
    } else {
        "ok"
    })
}

/// A `tools/list` response with only the tools `tools` (the
/// [`TOOLS_HEADER`] value) allows on `server` (empty: the aggregate
/// endpoint, whose tools are `<server>__<tool>`); `None` when it is not
/// one (left as it is).
pub fn filter_list(message: &[u8], tools: &str, server: &str) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(message).ok()?;
    let list = v.get_mut("result")?.get_mut("tools")?.as_array_mut()?;
    let allowed = |name: &str| match server {
        "" => split_prefixed(name).is_some_and(|(s, t)| tools_allowed(tools, s, t)),
        _ => tools_allowed(tools, server, name),
    };
    list.retain(|t| t.get("name").and_then(Value::as_str).is_some_and(allowed));
    serde_json::to_vec(&v).ok()
}

/// One SSE event written back, its tool list filtered.
fn write_event(out: &mut Vec<u8>, e: &Event, tools: &str, server: &str) {
    if !e.event.is_empty() {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(e.event.as_bytes());
        out.push(b'\n');
    }
    let filtered = filter_list(e.data.as_bytes(), tools, server);
    let data = filtered.as_deref().unwrap_or(e.data.as_bytes());
    for line in data.split(|b| *b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fake::FakeHost;

    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get_weather","inputSchema":{}},{"name":"delete_repo"},{"name":"search_docs"}]}}"#;

    fn names(body: &[u8]) -> Vec<String> {
        let v: Value = serde_json::from_slice(body).unwrap();
        v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn request(h: &mut FakeHost, method: &str, tool: &str) -> Exchange {
        h.req_headers = vec![
            (":path".into(), "/mcp/demo".into()),
            (TENANT.into(), "t".into()),
            (KEY_ID.into(), "k".into()),
            (
                TOOLS_HEADER.into(),
                "demo/get_*,demo/search_docs;demo/*".into(),
            ),
            (METHOD_HEADER.into(), method.into()),
            (TOOL_HEADER.into(), tool.into()),
            ("mcp-session-id".into(), "s1".into()),
        ];
        let mut x = Exchange::new(Rc::default());
        assert_eq!(x.on_request_headers(h), Action::Continue);
        x
    }

    #[test]
    fn gateway_headers_go_and_facts_stay() {
        let mut h = FakeHost::default();
        let _ = request(&mut h, "tools/call", "get_weather");
        assert_eq!(h.req_header(TENANT), None);
        assert_eq!(h.req_header(TOOLS_HEADER), None);
        assert_eq!(h.req_header("mcp-session-id").as_deref(), Some("s1"));
        assert_eq!(
            h.properties.get(property::SERVER).map(Vec::as_slice),
            Some(&b"demo"[..])
        );
        assert_eq!(
            h.properties.get(property::TOOL).map(Vec::as_slice),
            Some(&b"get_weather"[..])
        );
    }

    #[test]
    fn a_json_tool_list_keeps_the_allowed_tools() {
        let mut h = FakeHost::default();
        let mut x = request(&mut h, "tools/list", "");
        h.resp_headers = vec![
            (":status".into(), "200".into()),
            ("content-type".into(), "application/json".into()),
        ];
        assert_eq!(x.on_response_headers(&mut h, false), Action::Pause);
        h.resp_body = LIST.as_bytes().to_vec();
        let n = h.resp_body.len();
        assert_eq!(x.on_response_body(&mut h, n, true), Action::Continue);
        assert_eq!(names(&h.resp_body), ["get_weather", "search_docs"]);
    }

    #[test]
    fn an_sse_tool_list_is_filtered_at_every_split() {
        let stream = format!(
            ": ping\n\nevent: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}}\n\nevent: message\r\ndata: {LIST}\r\n\r\n"
        );
        let bytes = stream.as_bytes();
        for split in 0..bytes.len() {
            let mut h = FakeHost::default();
            let mut x = request(&mut h, "tools/list", "");
            h.resp_headers = vec![
                (":status".into(), "200".into()),
                ("content-type".into(), "text/event-stream".into()),
            ];
            assert_eq!(x.on_response_headers(&mut h, false), Action::Continue);
            let mut out = Vec::new();
            for (i, part) in [&bytes[..split], &bytes[split..]].into_iter().enumerate() {
                h.resp_body = part.to_vec();
                x.on_response_body(&mut h, part.len(), i == 1);
                out.extend_from_slice(&h.resp_body);
            }
            let text = String::from_utf8(out).unwrap();
            let last = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .next_back()
                .unwrap();
            assert_eq!(
                names(last.as_bytes()),
                ["get_weather", "search_docs"],
                "split {split}"
            );
            assert!(text.contains("notifications/message"), "split {split}");
        }
    }

    #[test]
    fn the_aggregate_list_is_filtered_by_server_and_tool() {
        let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"demo__get_weather"},{"name":"demo__delete_repo"},{"name":"docs__search"},{"name":"plain"}]}}"#;
        let out = filter_list(list.as_bytes(), "demo/get_*,docs/*;demo/*", "").unwrap();
        assert_eq!(names(&out), ["demo__get_weather"]);
        let out = filter_list(list.as_bytes(), "demo/get_*,docs/*", "").unwrap();
        assert_eq!(names(&out), ["demo__get_weather", "docs__search"]);
    }

    #[test]
    fn outcomes_of_tool_calls() {
        assert_eq!(
            outcome_of(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#),
            Some("ok")
        );
        assert_eq!(
            outcome_of(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#),
            Some("tool_error")
        );
        assert_eq!(
            outcome_of(br#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#),
            Some("error")
        );
        assert_eq!(
            outcome_of(br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            None
        );
        assert_eq!(outcome_of(b"{oops"), None);

        let mut h = FakeHost::default();
        let mut x = request(&mut h, "tools/call", "get_weather");
        h.resp_headers = vec![
            (":status".into(), "200".into()),
            ("content-type".into(), "text/event-stream".into()),
        ];
        x.on_response_headers(&mut h, false);
        let body = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"isError\":true}}\n\n";
        h.resp_body = body.to_vec();
        x.on_response_body(&mut h, body.len(), true);
        assert_eq!(h.resp_body, body, "a tool call's answer passes untouched");
        // Known before the stream ends (Envoy reads span tags then).
        assert_eq!(
            h.properties.get(property::OUTCOME).map(Vec::as_slice),
            Some(&b"tool_error"[..])
        );
        x.on_log(&mut h);
        assert_eq!(
            h.properties.get(property::OUTCOME).map(Vec::as_slice),
            Some(&b"tool_error"[..])
        );
        assert!(h
            .metric_names
            .iter()
            .any(|n| n
                == "tollgate_mcp.tenant.t.key.k.server.demo.tool.get_weather.calls.tool_error"));
    }
}
