//! The one host boundary: `tollgate_core::host::Host` over the raw
//! proxy-wasm ABI. The SDK's `hostcalls` panic on unexpected statuses, so
//! the calls that can legitimately fail are declared here and their status
//! handled; nothing in this file panics.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ptr::{null, null_mut};
use std::time::Duration;

use proxy_wasm::types::{BufferType, LogLevel, MapType, MetricType, Status};
use tollgate_core::host::{Host, Level, MetricKind};
use tollgate_core::keys::XorShift;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_log(level: LogLevel, message_data: *const u8, message_size: usize) -> Status;
    fn proxy_get_buffer_bytes(
        buffer_type: BufferType,
        start: usize,
        max_size: usize,
        return_buffer_data: *mut *mut u8,
        return_buffer_size: *mut usize,
    ) -> Status;
    fn proxy_set_buffer_bytes(
        buffer_type: BufferType,
        start: usize,
        size: usize,
        buffer_data: *const u8,
        buffer_size: usize,
    ) -> Status;
    fn proxy_get_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> Status;
    fn proxy_get_header_map_pairs(
        map_type: MapType,
        return_map_data: *mut *mut u8,
        return_map_size: *mut usize,
    ) -> Status;
    fn proxy_set_header_map_pairs(
        map_type: MapType,
        map_data: *const u8,
        map_size: usize,
    ) -> Status;
    fn proxy_replace_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> Status;
    fn proxy_remove_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
    ) -> Status;
    fn proxy_send_local_response(
        status_code: u32,
        status_code_details_data: *const u8,
        status_code_details_size: usize,
        body_data: *const u8,
        body_size: usize,
        headers_data: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> Status;
    fn proxy_get_shared_data(
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
        return_cas: *mut u32,
    ) -> Status;
    fn proxy_set_shared_data(
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
        cas: u32,
    ) -> Status;
    fn proxy_set_effective_context(context_id: u32) -> Status;
    fn proxy_call_foreign_function(
        function_name_data: *const u8,
        function_name_size: usize,
        arguments_data: *const u8,
        arguments_size: usize,
        results_data: *mut *mut u8,
        results_size: *mut usize,
    ) -> Status;
    fn proxy_define_metric(
        metric_type: MetricType,
        name_data: *const u8,
        name_size: usize,
        return_id: *mut u32,
    ) -> Status;
    fn proxy_increment_metric(metric_id: u32, offset: i64) -> Status;
    fn proxy_set_property(
        path_data: *const u8,
        path_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> Status;
    fn proxy_record_metric(metric_id: u32, value: u64) -> Status;
    fn proxy_get_property(
        path_data: *const u8,
        path_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> Status;
    fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> Status;
}

/// Take ownership of host-allocated bytes (allocated through the SDK's
/// `proxy_on_memory_allocate`, i.e. this module's global allocator).
fn owned(data: *mut u8, size: usize) -> Option<Vec<u8>> {
    if data.is_null() {
        None
    } else {
        // SAFETY: the host wrote `size` bytes into a buffer it allocated with
        // our allocator for exactly `size` bytes, and hands ownership to us.
        Some(unsafe { Vec::from_raw_parts(data, size, size) })
    }
}

pub fn log(level: LogLevel, msg: &str) {
    // SAFETY: pointer and length of a live &str.
    unsafe {
        let _ = proxy_log(level, msg.as_ptr(), msg.len());
    }
}

pub fn get_buffer(t: BufferType, start: usize, size: usize) -> Option<Vec<u8>> {
    let mut data = null_mut();
    let mut len = 0;
    // SAFETY: out-pointers are valid locals.
    match unsafe { proxy_get_buffer_bytes(t, start, size, &mut data, &mut len) } {
        Status::Ok => owned(data, len),
        _ => None,
    }
}

fn set_buffer(t: BufferType, start: usize, size: usize, value: &[u8]) -> bool {
    // SAFETY: pointer and length of a live slice.
    unsafe { proxy_set_buffer_bytes(t, start, size, value.as_ptr(), value.len()) == Status::Ok }
}

fn get_header(map: MapType, name: &str) -> Option<String> {
    let mut data = null_mut();
    let mut len = 0;
    // SAFETY: valid key slice and out-pointers.
    match unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), &mut data, &mut len) }
    {
        Status::Ok => owned(data, len).map(text_of),
        _ => None,
    }
}

/// Host bytes as text, without a copy when they are valid UTF-8 (header
/// values nearly always are; `from_utf8_lossy`'s chunk scan was a visible
/// part of the module's time in V8).
fn text_of(v: Vec<u8>) -> String {
    String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A header map's pairs in one host call (see [`serialize_map`] for the
/// layout).
fn header_pairs(map: MapType) -> Option<Vec<(String, String)>> {
    let mut data = null_mut();
    let mut len = 0;
    // SAFETY: out-pointers are valid locals.
    let bytes = match unsafe { proxy_get_header_map_pairs(map, &mut data, &mut len) } {
        Status::Ok => owned(data, len).unwrap_or_default(),
        _ => return None,
    };
    let word = |at: usize| -> Option<usize> {
        let b = bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(<[u8; 4]>::try_from(b).ok()?) as usize)
    };
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let count = word(0)?;
    let mut at = 4usize.checked_add(count.checked_mul(8)?)?;
    let mut pairs = Vec::with_capacity(count);
    let text = |b: &[u8]| match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    };
    for i in 0..count {
        let key_len = word(4 + i * 8)?;
        let value_len = word(8 + i * 8)?;
        // Each key and value is followed by a NUL.
        let key = bytes.get(at..at.checked_add(key_len)?)?;
        at = at.checked_add(key_len + 1)?;
        let value = bytes.get(at..at.checked_add(value_len)?)?;
        at = at.checked_add(value_len + 1)?;
        pairs.push((text(key), text(value)));
    }
    Some(pairs)
}

fn set_header(map: MapType, name: &str, value: Option<&str>) -> bool {
    // SAFETY: valid key/value slices.
    let st = unsafe {
        match value {
            Some(v) => {
                proxy_replace_header_map_value(map, name.as_ptr(), name.len(), v.as_ptr(), v.len())
            }
            None => proxy_remove_header_map_value(map, name.as_ptr(), name.len()),
        }
    };
    st == Status::Ok || (value.is_none() && st == Status::NotFound)
}

/// proxy-wasm header map serialisation: count, (key len, value len)*, then
/// each key and value NUL-terminated.
fn serialize_map(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut size = 4;
    for (k, v) in pairs {
        size += 8 + k.len() + v.len() + 2;
    }
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

thread_local! {
    static METRICS: RefCell<HashMap<String, Option<u32>>> = RefCell::new(HashMap::new());
    static RNG: RefCell<Option<XorShift>> = const { RefCell::new(None) };
}

/// Wall clock, milliseconds since the Unix epoch (for the root context).
pub fn now_ms() -> u64 {
    now_nanos() / 1_000_000
}

fn now_nanos() -> u64 {
    let mut t = 0u64;
    // SAFETY: valid out-pointer.
    if unsafe { proxy_get_current_time_nanoseconds(&mut t) } == Status::Ok {
        t
    } else {
        0
    }
}

pub struct WasmHost {
    context_id: u32,
    root_id: u32,
}

impl WasmHost {
    pub fn new(context_id: u32, root_id: u32) -> WasmHost {
        WasmHost {
            context_id,
            root_id,
        }
    }
}

impl Host for WasmHost {
    fn request_header(&self, name: &str) -> Option<String> {
        get_header(MapType::HttpRequestHeaders, name)
    }
    fn request_header_names(&self) -> Option<Vec<String>> {
        let pairs = header_pairs(MapType::HttpRequestHeaders)?;
        Some(pairs.into_iter().map(|(name, _)| name).collect())
    }
    fn request_headers(&self) -> Option<Vec<(String, String)>> {
        header_pairs(MapType::HttpRequestHeaders)
    }
    fn set_request_headers(&mut self, headers: &[(&str, &str)]) -> bool {
        let map = serialize_map(headers);
        // SAFETY: pointer and length of a live buffer.
        unsafe {
            proxy_set_header_map_pairs(MapType::HttpRequestHeaders, map.as_ptr(), map.len())
                == Status::Ok
        }
    }
    fn response_headers(&self) -> Option<Vec<(String, String)>> {
        header_pairs(MapType::HttpResponseHeaders)
    }
    fn set_request_header(&mut self, name: &str, value: Option<&str>) -> bool {
        set_header(MapType::HttpRequestHeaders, name, value)
    }
    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        get_buffer(BufferType::HttpRequestBody, 0, size)
    }
    fn set_request_body(&mut self, size: usize, body: &[u8]) -> bool {
        set_buffer(BufferType::HttpRequestBody, 0, size, body)
    }
    fn append_request_body(&mut self, body: &[u8]) -> bool {
        // Envoy adds at the end when the start is at or past the buffer's
        // length (any other start but 0 is refused).
        set_buffer(BufferType::HttpRequestBody, i32::MAX as usize, 0, body)
    }
    fn response_header(&self, name: &str) -> Option<String> {
        get_header(MapType::HttpResponseHeaders, name)
    }
    fn set_response_header(&mut self, name: &str, value: Option<&str>) -> bool {
        set_header(MapType::HttpResponseHeaders, name, value)
    }
    fn response_body(&self, size: usize) -> Option<Vec<u8>> {
        get_buffer(BufferType::HttpResponseBody, 0, size)
    }
    fn set_response_body(&mut self, size: usize, body: &[u8]) -> bool {
        set_buffer(BufferType::HttpResponseBody, 0, size, body)
    }
    fn response_from_upstream(&self) -> bool {
        // Property path parts are NUL-separated.
        let path = b"response\0code_details";
        let mut data = null_mut();
        let mut len = 0;
        // SAFETY: valid path slice and out-pointers.
        match unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut len) } {
            Status::Ok => match owned(data, len) {
                Some(v) => v == b"via_upstream",
                None => true,
            },
            // Unknown: assume a provider answered (translate as usual).
            _ => true,
        }
    }
    fn send_local_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let h = serialize_map(headers);
        // SAFETY: valid slices; details empty.
        let st = unsafe {
            proxy_send_local_response(
                status as u32,
                null(),
                0,
                body.as_ptr(),
                body.len(),
                h.as_ptr(),
                h.len(),
                -1,
            )
        };
        if st != Status::Ok {
            log(LogLevel::Error, "tollgate: send_local_response failed");
        }
    }
    fn resume_request(&mut self) -> bool {
        proxy_wasm::hostcalls::resume_http_request().is_ok()
    }
    fn clear_route_cache(&mut self) -> bool {
        let name = "clear_route_cache";
        let mut data = null_mut();
        let mut len = 0;
        // SAFETY: valid name slice and out-pointers; no arguments.
        let st = unsafe {
            proxy_call_foreign_function(name.as_ptr(), name.len(), null(), 0, &mut data, &mut len)
        };
        let _ = owned(data, len);
        st == Status::Ok
    }
    fn now_ms(&self) -> u64 {
        // proxy_get_current_time_nanoseconds is always there in Envoy; no
        // std::time fallback (it panics on wasm32-unknown-unknown).
        now_nanos() / 1_000_000
    }
    fn random_u32(&mut self) -> u32 {
        RNG.with(|r| {
            let mut r = r.borrow_mut();
            let rng = r.get_or_insert_with(|| {
                XorShift::new(now_nanos() ^ ((self.context_id as u64) << 32))
            });
            rng.next_u32()
        })
    }
    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        let mut data = null_mut();
        let mut len = 0;
        let mut cas = 0;
        // SAFETY: valid key slice and out-pointers.
        match unsafe {
            proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut len, &mut cas)
        } {
            Status::Ok => owned(data, len),
            _ => None,
        }
    }
    fn shared_set(&mut self, key: &str, value: &[u8]) -> bool {
        // SAFETY: valid slices; cas 0 = unconditional.
        unsafe {
            proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), 0)
                == Status::Ok
        }
    }
    fn post(&mut self, cluster: &str, path: &str, body: &[u8], timeout_ms: u64) -> bool {
        // The call is made on behalf of the root context, which outlives this
        // request: a callout owned by the request's context would be
        // cancelled when that context is destroyed right after on_log.
        // SAFETY: plain value.
        unsafe {
            let _ = proxy_set_effective_context(self.root_id);
        }
        let r = post(cluster, path, body, timeout_ms);
        // SAFETY: plain value.
        unsafe {
            let _ = proxy_set_effective_context(self.context_id);
        }
        r
    }
    fn call(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32> {
        // Made by this request's context, so the answer comes back to it.
        proxy_wasm::hostcalls::dispatch_http_call(
            cluster,
            headers.to_vec(),
            Some(body),
            vec![],
            Duration::from_millis(timeout_ms),
        )
        .ok()
    }
    fn metric(&mut self, kind: MetricKind, name: &str, value: u64) {
        if let Some(id) = self.define_metric(kind, name) {
            self.record_metric(kind, id, value);
        }
    }
    fn define_metric(&mut self, kind: MetricKind, name: &str) -> Option<u32> {
        METRICS.with(|m| {
            let mut m = m.borrow_mut();
            if let Some(id) = m.get(name) {
                return *id;
            }
            let t = match kind {
                MetricKind::Counter => MetricType::Counter,
                MetricKind::Histogram => MetricType::Histogram,
            };
            let mut id = 0u32;
            // SAFETY: valid name slice and out-pointer.
            let st = unsafe { proxy_define_metric(t, name.as_ptr(), name.len(), &mut id) };
            let id = (st == Status::Ok).then_some(id);
            m.insert(name.to_string(), id);
            id
        })
    }
    fn record_metric(&mut self, kind: MetricKind, id: u32, value: u64) {
        // SAFETY: plain values.
        unsafe {
            let _ = match kind {
                MetricKind::Counter => {
                    proxy_increment_metric(id, value.min(i64::MAX as u64) as i64)
                }
                MetricKind::Histogram => proxy_record_metric(id, value),
            };
        }
    }
    fn set_property(&mut self, name: &str, value: &[u8]) -> bool {
        // SAFETY: pointers and lengths of live slices.
        let st =
            unsafe { proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len()) };
        st == Status::Ok
    }
    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        // Property path parts are NUL-separated.
        let path = path.join("\0");
        let mut data = null_mut();
        let mut len = 0;
        // SAFETY: valid path slice and out-pointers.
        match unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut len) } {
            Status::Ok => owned(data, len),
            _ => None,
        }
    }
    fn log(&self, level: Level, msg: &str) {
        let l = match level {
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        log(l, msg);
    }
}

/// Fire-and-forget POST to an Envoy cluster from the current context. The
/// SDK's dispatch_http_call registers the token with the SDK dispatcher (its
/// answer, a 204, is then ignored); it only panics on statuses Envoy does not
/// return for proxy_http_call.
pub fn post(cluster: &str, path: &str, body: &[u8], timeout_ms: u64) -> bool {
    let hdrs = vec![
        (":method", "POST"),
        (":path", path),
        (":authority", cluster),
        ("content-type", "application/json"),
    ];
    proxy_wasm::hostcalls::dispatch_http_call(
        cluster,
        hdrs,
        Some(body),
        vec![],
        Duration::from_millis(timeout_ms),
    )
    .is_ok()
}
