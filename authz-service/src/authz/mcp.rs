//! The Check of an MCP request (`/mcp/<server>`): the same virtual key,
//! then the key's and its tenant's MCP rules ([`crate::mcp_rules`]): may
//! this key use this server, and for `tools/call` this tool; its calls per
//! minute or day, taken from the same buckets and leases as every other
//! limit; and the call's price, reserved on the same money budgets (no
//! usage report settles it: the price is the cost).
//!
//! Envoy's MCP filter parsed the JSON-RPC body before the Check and sends
//! its method, id and tool name as metadata ([`McpCall`]); the answer is a
//! [`Decision`] like every Check's, made JSON-RPC-shaped by the service
//! (`crate::service::mcp`).

use std::time::Instant;

use serde_json::Value;
use tollgate_wire::mcp::{header_safe, METHOD_HEADER, TOOLS_HEADER, TOOL_HEADER};

use super::{Authorizer, CheckInput, Counted, Planned};
use crate::decision::{echo, error_body, Decision};
use crate::plan::Scope;
use crate::policy::{Key, Kind, Limit, Policy};
use crate::storage::{bucket_key, BucketOp, Store};

/// What Envoy's MCP filter read of the request (and the route's server).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpCall {
    /// `<server>` of `/mcp/<server>`; empty on the aggregate endpoint
    /// (`/mcp`), whose tool names carry their server (`demo__get_weather`).
    pub server: String,
    /// The JSON-RPC method (`None`: no JSON-RPC body, e.g. a session's
    /// GET stream or DELETE).
    pub method: Option<String>,
    /// The JSON-RPC id, as sent.
    pub id: Option<Value>,
    /// `params.name` of the request, as sent (a string or not).
    pub name: Option<Value>,
}

impl McpCall {
    /// The tool of a `tools/call`: `Some(Ok(name))`, `Some(Err(()))` when
    /// `params.name` is missing or not a string; `None` for other methods.
    pub fn tool(&self) -> Option<Result<&str, ()>> {
        (self.method.as_deref() == Some("tools/call"))
            .then(|| self.name.as_ref().and_then(Value::as_str).ok_or(()))
    }

    /// The server as logged: `*` for the aggregate endpoint.
    pub fn server_label(&self) -> &str {
        if self.server.is_empty() {
            "*"
        } else {
            &self.server
        }
    }
}

/// What the service sends on beside an allowed MCP Check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpAllowed {
    /// [`TOOLS_HEADER`]: the key's and its tenant's tool patterns.
    pub tools_header: String,
    /// [`METHOD_HEADER`], [`TOOL_HEADER`]: the call's method and tool.
    pub method: String,
    pub tool: String,
    /// The key's tenant and id once it is known (refused calls too: the
    /// access log names who tried).
    pub tenant: Option<String>,
    pub key_id: Option<String>,
}

/// The name of an MCP limit from its bucket's key (`…:kx:<key id>:<name>`
/// or `…:tx:<name>`), for the 429's message.
pub fn limit_name(p: &Planned) -> Option<&str> {
    match p.scope {
        Scope::KeyMcp => p.op.key.split_once(":kx:")?.1.split_once(':').map(|x| x.1),
        Scope::TenantMcp => p.op.key.split_once(":tx:").map(|x| x.1),
        _ => None,
    }
}

fn deny(status: u16, kind: &str, code: &str, msg: &str) -> Decision {
    Decision::Deny {
        status,
        body: error_body(msg, kind, code),
        headers: Vec::new(),
    }
}

/// The calls buckets of a `tools/call` of `tool` on `server` by `key`.
fn plan_calls(policy: &Policy, key: &Key, server: &str, tool: &str) -> Vec<Planned> {
    let mut out = Vec::new();
    let tenant_rules = policy.tenant(&key.tenant).and_then(|t| t.mcp.as_ref());
    let owners = [
        (Scope::KeyMcp, Some(&key.mcp), format!("kx:{}:", key.id)),
        (Scope::TenantMcp, tenant_rules, "tx:".to_string()),
    ];
    for (scope, rules, prefix) in owners {
        let Some(rules) = rules else { continue };
        for l in rules.limits_for(server, tool) {
            let kp = if l.period == "day" { "rd" } else { "rm" };
            out.push(Planned {
                op: BucketOp {
                    key: bucket_key(&key.tenant, kp, &format!("{prefix}{}", l.name)),
                    spec: l.spec,
                    take: 1,
                    lease: 0,
                },
                limit: Limit {
                    kind: Kind::Requests,
                    period: l.period,
                    spec: l.spec,
                },
                scope,
            });
        }
    }
    out
}

/// The tool patterns of `key` and its tenant, as [`TOOLS_HEADER`] carries
/// them.
fn tools_header(policy: &Policy, key: &Key) -> String {
    let mut groups = vec![key.mcp.tools.as_deref().unwrap_or_default().join(",")];
    if let Some(t) = policy
        .tenant(&key.tenant)
        .and_then(|t| t.mcp.as_ref())
        .and_then(|m| m.tools.as_ref())
    {
        groups.push(t.join(","));
    }
    groups.join(";")
}

impl<S: Store> Authorizer<S> {
    /// Decide one MCP request: the key, the server, the tool, its limits
    /// and its price.
    pub async fn check_mcp(&self, input: &CheckInput, call: &McpCall) -> (Decision, McpAllowed) {
        let started = Instant::now();
        let policy = self.policy();
        let (decision, allowed) = match self.authenticate(&policy, input) {
            Err(d) => (d, McpAllowed::default()),
            Ok((key, _)) => {
                let allowed = McpAllowed {
                    tools_header: tools_header(&policy, key),
                    method: header_safe(call.method.as_deref().unwrap_or("")).to_string(),
                    tool: match call.tool() {
                        Some(Ok(t)) => header_safe(t).to_string(),
                        _ => String::new(),
                    },
                    tenant: Some(key.tenant.clone()),
                    key_id: Some(key.id.clone()),
                };
                (self.decide_mcp(&policy, key, call).await, allowed)
            }
        };
        self.backend.metrics.checks.inc();
        self.backend
            .metrics
            .check_duration
            .observe(started.elapsed().as_secs_f64());
        (decision, allowed)
    }

    async fn decide_mcp(&self, policy: &Policy, key: &Key, call: &McpCall) -> Decision {
        let mut server = call.server.as_str();
        let tenant = policy.tenant(&key.tenant).and_then(|t| t.mcp.as_ref());
        let allow = |rate_headers| Decision::Allow {
            tenant: key.tenant.clone(),
            key_id: key.id.clone(),
            models: key.models_header.clone(),
            rate_headers,
            reserved: 0,
            reserved_at: None,
            cache_breakpoints: false,
            output: None,
            settle_now: false,
            slot: None,
        };
        let aggregate = server.is_empty();
        let tool = match call.tool() {
            None if aggregate => {
                // Any other message of the aggregate endpoint: the key may
                // use some server.
                if key.mcp.tools.as_ref().is_none_or(|t| !t.is_empty()) {
                    self.backend.record("allowed", "mcp");
                    return allow(Vec::new());
                }
                self.backend.record("denied", "mcp_server_not_allowed");
                let msg = format!("The virtual key {} may not use MCP servers.", key.id);
                return deny(403, "permission_error", "server_not_allowed", &msg);
            }
            None => {
                // Any other message: the key may use something of the server.
                if key.mcp.allows_server(server) && tenant.is_none_or(|t| t.allows_server(server)) {
                    self.backend.record("allowed", "mcp");
                    return allow(Vec::new());
                }
                self.backend.record("denied", "mcp_server_not_allowed");
                let msg = format!(
                    "The virtual key {} may not use MCP server {}.",
                    key.id,
                    echo(server)
                );
                return deny(403, "permission_error", "server_not_allowed", &msg);
            }
            Some(Err(())) => {
                self.backend.record("denied", "mcp_invalid");
                return deny(
                    400,
                    "invalid_request_error",
                    "invalid_params",
                    "tools/call needs params.name, the tool's name as a string.",
                );
            }
            Some(Ok(tool)) if aggregate => match tollgate_wire::mcp::split_prefixed(tool) {
                Some((s, t)) => {
                    server = s;
                    t
                }
                None => {
                    self.backend.record("denied", "mcp_tool_not_allowed");
                    let msg = format!(
                        "The virtual key {} may not call tool {}: tools here are named <server>__<tool>.",
                        key.id,
                        echo(tool)
                    );
                    return deny(403, "permission_error", "tool_not_allowed", &msg);
                }
            },
            Some(Ok(tool)) => tool,
        };
        if !key.mcp.allows_tool(server, tool)
            || tenant.is_some_and(|t| !t.allows_tool(server, tool))
        {
            self.backend.record("denied", "mcp_tool_not_allowed");
            let msg = format!(
                "The virtual key {} may not call tool {} of MCP server {}.",
                key.id,
                echo(tool),
                echo(server)
            );
            return deny(403, "permission_error", "tool_not_allowed", &msg);
        }
        let price = policy.mcp_prices.of(server, tool);
        let money = if price > 0 {
            match self.spend().admit_nano(policy, key, None, price).await {
                Ok(m) => m,
                Err(d) => return d,
            }
        } else {
            None
        };
        let budget_headers = money
            .as_ref()
            .map(|m| m.headers.clone())
            .unwrap_or_default();
        let planned = plan_calls(policy, key, server, tool);
        let d = if planned.is_empty() {
            self.backend.record("allowed", "mcp");
            allow(budget_headers)
        } else {
            let with_budget = |mut h: Vec<(&'static str, String)>, _| {
                h.extend(budget_headers.iter().cloned());
                allow(h)
            };
            self.take_buckets(&planned, 0, policy, key, None, Counted::Every, with_budget)
                .await
        };
        if let (Some(taken), Decision::Deny { .. } | Decision::Unavailable(_)) = (&money, &d) {
            self.spend().put_back(taken);
        }
        d
    }
}

/// The headers the filter gets with an allowed MCP Check: always all
/// three, `-` for none (Envoy would drop an empty value and leave a
/// client's copy), so a client cannot forge one.
pub fn allowed_headers(allowed: &McpAllowed) -> [(&'static str, String); 3] {
    let value = |v: &str| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.to_string()
        }
    };
    [
        (TOOLS_HEADER, value(&allowed.tools_header)),
        (METHOD_HEADER, value(&allowed.method)),
        (TOOL_HEADER, value(&allowed.tool)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::policy::hash_key;
    use crate::storage::{ManualClock, MemoryStore};
    use serde_json::json;
    use std::sync::Arc;

    fn authorizer() -> Authorizer<MemoryStore> {
        let yaml = format!(
            "version: 1
mcp_prices: {{demo/get_weather: 0.25}}
tenants:
  t:
    mcp: {{tools: [\"demo/*\", \"docs/*\"], limits: {{\"demo/search_docs\": {{calls_per_minute: 1}}}}}}
    budgets: {{usd_per_day: 0.5}}
  u: {{}}
keys:
  - id: k
    tenant: t
    sha256: {}
    mcp:
      tools: [\"demo/get_weather\", \"demo/search_*\", \"weather/*\"]
      limits: {{demo: {{calls_per_minute: 3}}}}
  - {{id: plain, tenant: u, sha256: {}}}
",
            hash_key("tg-k"),
            hash_key("tg-plain")
        );
        Authorizer::new(
            Policy::from_yaml(&yaml).unwrap(),
            MemoryStore::new(ManualClock::new(0)),
            Arc::new(Metrics::new().unwrap()),
        )
    }

    fn input(key: &str) -> CheckInput {
        CheckInput {
            authorization: Some(format!("Bearer {key}")),
            ..Default::default()
        }
    }

    fn call(method: &str, name: Option<Value>) -> McpCall {
        McpCall {
            server: "demo".into(),
            method: Some(method.into()),
            id: Some(json!(1)),
            name,
        }
    }

    fn status(d: &Decision) -> u16 {
        match d {
            Decision::Allow { .. } => 200,
            Decision::Deny { status, .. } => *status,
            Decision::Unavailable(_) => 503,
        }
    }

    #[tokio::test]
    async fn tools_servers_limits_and_prices() {
        let a = authorizer();
        let k = input("tg-k");
        let (d, allowed) = a.check_mcp(&k, &call("tools/list", None)).await;
        assert_eq!(status(&d), 200);
        assert_eq!(
            allowed.tools_header,
            "demo/get_weather,demo/search_*,weather/*;demo/*,docs/*"
        );
        // Allowed by the key, not by its tenant: refused.
        let weather = McpCall {
            server: "weather".into(),
            ..call("tools/call", Some(json!("x")))
        };
        assert_eq!(status(&a.check_mcp(&k, &weather).await.0), 403);
        let (d, _) = a
            .check_mcp(&k, &call("tools/call", Some(json!("delete_repo"))))
            .await;
        let Decision::Deny {
            status: 403, body, ..
        } = &d
        else {
            panic!("{d:?}")
        };
        assert!(
            body.contains("may not call tool \\\"delete_repo\\\" of MCP server \\\"demo\\\""),
            "{body}"
        );
        assert_eq!(
            status(&a.check_mcp(&k, &call("tools/call", Some(json!(5)))).await.0),
            400
        );
        // The tenant's 1 a minute on search_docs.
        let search = call("tools/call", Some(json!("search_docs")));
        assert_eq!(status(&a.check_mcp(&k, &search).await.0), 200);
        let (d, _) = a.check_mcp(&k, &search).await;
        let Decision::Deny {
            status: 429, body, ..
        } = &d
        else {
            panic!("{d:?}")
        };
        assert!(
            body.contains("Rate limit reached for tenant t, MCP calls of demo/search_docs on requests per minute: limit 1"),
            "{body}"
        );
        // $0.25 a call of a $0.50 day: two calls (the key's 3 a minute on demo
        // is then used up too: 2 + search_docs).
        let weather = call("tools/call", Some(json!("get_weather")));
        assert_eq!(status(&a.check_mcp(&k, &weather).await.0), 200);
        assert_eq!(status(&a.check_mcp(&k, &weather).await.0), 200);
        let (d, _) = a.check_mcp(&k, &weather).await;
        let Decision::Deny {
            status: 429, body, ..
        } = &d
        else {
            panic!("{d:?}")
        };
        assert!(body.contains("budget_exceeded"), "{body}");
        // A key without `mcp`: no server.
        let (d, _) = a
            .check_mcp(&input("tg-plain"), &call("initialize", None))
            .await;
        assert_eq!(status(&d), 403);
        let (d, _) = a
            .check_mcp(&input("tg-nope"), &call("initialize", None))
            .await;
        assert_eq!(status(&d), 401);
    }
}
