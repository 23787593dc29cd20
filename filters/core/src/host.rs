//! The one host boundary: everything the request flow needs from Envoy.
//! `tollgate-filter` implements it with proxy-wasm host calls;
//! [`crate::host::fake::FakeHost`] implements it for native tests.

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
    /// Set (Some) or remove (None). Returns false when the host refused.
    fn set_request_header(&mut self, name: &str, value: Option<&str>) -> bool;
    /// The buffered request body (`size` bytes from 0).
    fn request_body(&self, size: usize) -> Option<Vec<u8>>;
    fn set_request_body(&mut self, size: usize, body: &[u8]) -> bool;
    fn response_header(&self, name: &str) -> Option<String>;
    fn set_response_header(&mut self, name: &str, value: Option<&str>) -> bool;
    fn response_body(&self, size: usize) -> Option<Vec<u8>>;
    fn set_response_body(&mut self, size: usize, body: &[u8]) -> bool;
    /// Did the response come from the upstream (Envoy's
    /// `response.code_details == "via_upstream"`), rather than being a local
    /// reply of Envoy's (connect failure, timeout, overflow)?
    fn response_from_upstream(&self) -> bool;
    fn send_local_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]);
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
        pub fn req_header(&self, n: &str) -> Option<String> {
            get(&self.req_headers, n)
        }
        pub fn resp_header(&self, n: &str) -> Option<String> {
            get(&self.resp_headers, n)
        }
    }

    impl Host for FakeHost {
        fn request_header(&self, name: &str) -> Option<String> {
            get(&self.req_headers, name)
        }
        fn request_header_names(&self) -> Option<Vec<String>> {
            Some(self.req_headers.iter().map(|(k, _)| k.clone()).collect())
        }
        fn set_request_header(&mut self, name: &str, value: Option<&str>) -> bool {
            set(&mut self.req_headers, name, value);
            true
        }
        fn request_body(&self, size: usize) -> Option<Vec<u8>> {
            Some(self.req_body.iter().take(size).copied().collect())
        }
        fn set_request_body(&mut self, _size: usize, body: &[u8]) -> bool {
            self.req_body = body.to_vec();
            true
        }
        fn response_header(&self, name: &str) -> Option<String> {
            get(&self.resp_headers, name)
        }
        fn set_response_header(&mut self, name: &str, value: Option<&str>) -> bool {
            set(&mut self.resp_headers, name, value);
            true
        }
        fn response_body(&self, size: usize) -> Option<Vec<u8>> {
            Some(self.resp_body.iter().take(size).copied().collect())
        }
        fn set_response_body(&mut self, _size: usize, body: &[u8]) -> bool {
            self.resp_body = body.to_vec();
            true
        }
        fn response_from_upstream(&self) -> bool {
            !self.envoy_local_response
        }
        fn send_local_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
            self.local_reply = Some((
                status,
                headers
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
                body.to_vec(),
            ));
        }
        fn clear_route_cache(&mut self) -> bool {
            self.route_cleared = true;
            true
        }
        fn now_ms(&self) -> u64 {
            self.now
        }
        fn random_u32(&mut self) -> u32 {
            if self.random.is_empty() {
                0
            } else {
                self.random.remove(0)
            }
        }
        fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
            self.shared.borrow().get(key).cloned()
        }
        fn shared_set(&mut self, key: &str, value: &[u8]) -> bool {
            self.shared
                .borrow_mut()
                .insert(key.to_string(), value.to_vec());
            true
        }
        fn post(&mut self, cluster: &str, path: &str, body: &[u8], _timeout_ms: u64) -> bool {
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
            *self.metrics.entry(name.to_string()).or_default() += value;
        }
        fn define_metric(&mut self, _kind: MetricKind, name: &str) -> Option<u32> {
            if let Some(i) = self.metric_names.iter().position(|n| n == name) {
                return u32::try_from(i).ok();
            }
            self.metric_names.push(name.to_string());
            u32::try_from(self.metric_names.len() - 1).ok()
        }
        fn record_metric(&mut self, kind: MetricKind, id: u32, value: u64) {
            if let Some(name) = self.metric_names.get(id as usize).cloned() {
                self.metric(kind, &name, value);
            }
        }
        fn set_property(&mut self, name: &str, value: &[u8]) -> bool {
            self.properties.insert(name.to_string(), value.to_vec());
            true
        }
        fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
            self.properties.get(&path.join(".")).cloned()
        }
        fn log(&self, _level: Level, msg: &str) {
            self.logs.borrow_mut().push(msg.to_string());
        }
    }
}
