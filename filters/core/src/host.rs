//! The one host boundary: everything the request flow needs from Envoy.
//! `tollgate-filter` implements it with proxy-wasm host calls;
//! [`crate::host::fake::FakeHost`] implements it for native tests.

/// What a callback tells the host to do with the stream: go on, or hold
/// it (the request's and the attempt's callbacks both answer with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Histogram,
}

pub trait Host {
    fn request_header(&self, name: &str) -> Option<String>;
    /// The names of every request header (one host call); `None` when the
    /// host refused.
    fn request_header_names(&self) -> Option<Vec<String>>;
    /// Every request header, name and value (one host call where the host
    /// has it); `None` when the host refused.
    fn request_headers(&self) -> Option<Vec<(String, String)>> {
        let names = self.request_header_names()?;
        Some(
            names
                .into_iter()
                .filter_map(|n| self.request_header(&n).map(|v| (n, v)))
                .collect(),
        )
    }
    /// Set (Some) or remove (None). Returns false when the host refused.
    fn set_request_header(&mut self, name: &str, value: Option<&str>) -> bool;
    /// Replace every request header with these (one host call where the
    /// host has it). Returns false when the host refused or cannot: then
    /// nothing changed.
    fn set_request_headers(&mut self, _headers: &[(&str, &str)]) -> bool {
        false
    }
    /// The buffered request body (`size` bytes from 0).
    fn request_body(&self, size: usize) -> Option<Vec<u8>>;
    /// Replaces the body's first `size` bytes with `body` (the rest stays).
    fn set_request_body(&mut self, size: usize, body: &[u8]) -> bool;
    /// Adds `body` at the end of the request body.
    fn append_request_body(&mut self, body: &[u8]) -> bool;
    fn response_header(&self, name: &str) -> Option<String>;
    /// Every response header, name and value (one host call where the host
    /// has it); `None` when the host refused.
    fn response_headers(&self) -> Option<Vec<(String, String)>> {
        None
    }
    fn set_response_header(&mut self, name: &str, value: Option<&str>) -> bool;
    fn response_body(&self, size: usize) -> Option<Vec<u8>>;
    fn set_response_body(&mut self, size: usize, body: &[u8]) -> bool;
    /// Did the response come from the upstream (Envoy's
    /// `response.code_details == "via_upstream"`), rather than being a local
    /// reply of Envoy's (connect failure, timeout, overflow)?
    fn response_from_upstream(&self) -> bool;
    fn send_local_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]);
    /// Let a request paused in its body callback go on (after a call made
    /// on its behalf answered). Returns false when the host refused.
    fn resume_request(&mut self) -> bool;
    /// Foreign function `clear_route_cache`.
    fn clear_route_cache(&mut self) -> bool;
    /// Wall clock, milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    fn random_u32(&mut self) -> u32;
    /// Shared data across the VMs of all worker threads.
    fn shared_get(&self, key: &str) -> Option<Vec<u8>>;
    fn shared_set(&mut self, key: &str, value: &[u8]) -> bool;
    /// Fire-and-forget POST to an Envoy cluster.
    fn post(&mut self, cluster: &str, path: &str, body: &[u8], timeout_ms: u64) -> bool;
    /// An HTTP call (headers include `:method`, `:path`, `:authority`) to an
    /// Envoy cluster on behalf of this request; its answer comes back to
    /// [`crate::flow::Flow::on_call_response`] with the returned token.
    /// `None` when the host refused the call.
    fn call(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32>;
    fn metric(&mut self, kind: MetricKind, name: &str, value: u64);
    /// Define a metric (once per name and worker); `None` when refused.
    fn define_metric(&mut self, kind: MetricKind, name: &str) -> Option<u32>;
    /// Add to a counter or record in a histogram defined by
    /// [`Host::define_metric`].
    fn record_metric(&mut self, kind: MetricKind, id: u32, value: u64);
    /// Set Envoy filter state `wasm.<name>` (read by the access log and the
    /// tracer). Returns false when the host refused.
    fn set_property(&mut self, name: &str, value: &[u8]) -> bool;
    /// An Envoy property by path (`["upstream", "request_attempt_count"]`,
    /// or `["tollgate.model"]` for filter state the filter set); `None` when
    /// absent or refused.
    fn property(&self, _path: &[&str]) -> Option<Vec<u8>> {
        None
    }
    fn log(&self, level: Level, msg: &str);
}

#[cfg(any(test, feature = "fake-host"))]
pub mod fake {
    //! An in-memory host for tests.
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// (status, headers, body) of a local reply.
    pub type LocalReply = (u16, Vec<(String, String)>, Vec<u8>);
    /// (cluster, headers, body) of a [`Host::call`].
    pub type Call = (String, Vec<(String, String)>, Vec<u8>);

    #[derive(Debug, Default)]
    pub struct FakeHost {
        pub req_headers: Vec<(String, String)>,
        pub req_body: Vec<u8>,
        pub resp_headers: Vec<(String, String)>,
        pub resp_body: Vec<u8>,
        pub local_reply: Option<LocalReply>,
        /// Simulates an Envoy local reply on the response path.
        pub envoy_local_response: bool,
        pub route_cleared: bool,
        /// [`Host::resume_request`] calls.
        pub resumed: u32,
        pub now: u64,
        pub random: Vec<u32>,
        pub shared: RefCell<HashMap<String, Vec<u8>>>,
        pub posts: Vec<(String, String, Vec<u8>)>,
        /// (cluster, headers, body) of each [`Host::call`]; the token is the
        /// index + 1.
        pub calls: Vec<Call>,
        pub metrics: HashMap<String, u64>,
        /// Names of [`Host::define_metric`]; the id is the index.
        pub metric_names: Vec<String>,
        /// [`Host::set_property`] values.
        pub properties: HashMap<String, Vec<u8>>,
        pub logs: RefCell<Vec<String>>,
        /// Each [`Host::set_request_body`]: (bytes replaced, bytes written).
        pub req_body_writes: Vec<(usize, usize)>,
        /// Each [`Host::append_request_body`]: bytes written.
        pub req_body_appends: Vec<usize>,
        /// [`Host::set_request_body`] and [`Host::append_request_body`] refuse
        /// (and change nothing).
        pub refuse_body_writes: bool,
        /// How many times each [`Host`] method was called (what a request
        /// costs in host calls).
        pub host_calls: RefCell<std::collections::BTreeMap<&'static str, u32>>,
    }

    fn get(h: &[(String, String)], n: &str) -> Option<String> {
        h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
    }
    fn set(h: &mut Vec<(String, String)>, n: &str, v: Option<&str>) {
        h.retain(|(k, _)| k != n);
        if let Some(v) = v {
            h.push((n.to_string(), v.to_string()));
        }
    }

    impl FakeHost {
        fn note(&self, call: &'static str) {
            *self.host_calls.borrow_mut().entry(call).or_default() += 1;
        }
        /// Host calls made so far, all kinds together.
        pub fn host_call_count(&self) -> u32 {
            self.host_calls.borrow().values().sum()
        }
        pub fn req_header(&self, n: &str) -> Option<String> {
            get(&self.req_headers, n)
        }
        pub fn resp_header(&self, n: &str) -> Option<String> {
            get(&self.resp_headers, n)
        }
    }

    impl Host for FakeHost {
        fn request_header(&self, name: &str) -> Option<String> {
            self.note("request_header");
            get(&self.req_headers, name)
        }
        fn request_header_names(&self) -> Option<Vec<String>> {
            self.note("request_header_names");
            Some(self.req_headers.iter().map(|(k, _)| k.clone()).collect())
        }
        fn set_request_header(&mut self, name: &str, value: Option<&str>) -> bool {
            self.note("set_request_header");
            set(&mut self.req_headers, name, value);
            true
        }
        fn request_body(&self, size: usize) -> Option<Vec<u8>> {
            self.note("request_body");
            Some(self.req_body.iter().take(size).copied().collect())
        }
        fn set_request_body(&mut self, size: usize, body: &[u8]) -> bool {
            self.note("set_request_body");
            self.req_body_writes.push((size, body.len()));
            if self.refuse_body_writes {
                return false;
            }
            // As Envoy does: drain `size` bytes, prepend `body`.
            let size = size.min(self.req_body.len());
            self.req_body.splice(..size, body.iter().copied());
            true
        }
        fn append_request_body(&mut self, body: &[u8]) -> bool {
            self.note("append_request_body");
            self.req_body_appends.push(body.len());
            if self.refuse_body_writes {
                return false;
            }
            self.req_body.extend_from_slice(body);
            true
        }
        fn response_headers(&self) -> Option<Vec<(String, String)>> {
            self.note("response_headers");
            Some(self.resp_headers.clone())
        }
        fn request_headers(&self) -> Option<Vec<(String, String)>> {
            self.note("request_headers");
            Some(self.req_headers.clone())
        }
        fn set_request_headers(&mut self, headers: &[(&str, &str)]) -> bool {
            self.note("set_request_headers");
            self.req_headers = headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            true
        }
        fn response_header(&self, name: &str) -> Option<String> {
            self.note("response_header");
            get(&self.resp_headers, name)
        }
        fn set_response_header(&mut self, name: &str, value: Option<&str>) -> bool {
            self.note("set_response_header");
            set(&mut self.resp_headers, name, value);
            true
        }
        fn response_body(&self, size: usize) -> Option<Vec<u8>> {
            self.note("response_body");
            Some(self.resp_body.iter().take(size).copied().collect())
        }
        fn set_response_body(&mut self, _size: usize, body: &[u8]) -> bool {
            self.note("set_response_body");
            self.resp_body = body.to_vec();
            true
        }
        fn response_from_upstream(&self) -> bool {
            self.note("response_from_upstream");
            !self.envoy_local_response
        }
        fn send_local_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
            self.note("send_local_reply");
            self.local_reply = Some((
                status,
                headers
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
                body.to_vec(),
            ));
        }
        fn resume_request(&mut self) -> bool {
            self.note("resume_request");
            self.resumed += 1;
            true
        }
        fn clear_route_cache(&mut self) -> bool {
            self.note("clear_route_cache");
            self.route_cleared = true;
            true
        }
        fn now_ms(&self) -> u64 {
            self.note("now_ms");
            self.now
        }
        fn random_u32(&mut self) -> u32 {
            // Not a host call: the VM keeps its own generator.
            if self.random.is_empty() {
                0
            } else {
                self.random.remove(0)
            }
        }
        fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
            self.note("shared_get");
            self.shared.borrow().get(key).cloned()
        }
        fn shared_set(&mut self, key: &str, value: &[u8]) -> bool {
            self.note("shared_set");
            self.shared
                .borrow_mut()
                .insert(key.to_string(), value.to_vec());
            true
        }
        fn post(&mut self, cluster: &str, path: &str, body: &[u8], _timeout_ms: u64) -> bool {
            self.note("post");
            self.posts
                .push((cluster.to_string(), path.to_string(), body.to_vec()));
            true
        }
        fn call(
            &mut self,
            cluster: &str,
            headers: &[(&str, &str)],
            body: &[u8],
            _timeout_ms: u64,
        ) -> Option<u32> {
            self.note("call");
            self.calls.push((
                cluster.to_string(),
                headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body.to_vec(),
            ));
            u32::try_from(self.calls.len()).ok()
        }
        fn metric(&mut self, _kind: MetricKind, name: &str, value: u64) {
            self.note("metric");
            *self.metrics.entry(name.to_string()).or_default() += value;
        }
        fn define_metric(&mut self, _kind: MetricKind, name: &str) -> Option<u32> {
            if let Some(i) = self.metric_names.iter().position(|n| n == name) {
                // A VM defines a name once (the real host caches it).
                return u32::try_from(i).ok();
            }
            self.note("define_metric");
            self.metric_names.push(name.to_string());
            u32::try_from(self.metric_names.len() - 1).ok()
        }
        fn record_metric(&mut self, _kind: MetricKind, id: u32, value: u64) {
            self.note("record_metric");
            if let Some(name) = self.metric_names.get(id as usize).cloned() {
                *self.metrics.entry(name).or_default() += value;
            }
        }
        fn set_property(&mut self, name: &str, value: &[u8]) -> bool {
            self.note("set_property");
            self.properties.insert(name.to_string(), value.to_vec());
            true
        }
        fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
            self.note("property");
            self.properties.get(&path.join(".")).cloned()
        }
        fn log(&self, _level: Level, msg: &str) {
            self.note("log");
            self.logs.borrow_mut().push(msg.to_string());
        }
    }
}
