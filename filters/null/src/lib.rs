//! The bench's null proxy-wasm filter: what any Wasm filter costs in Envoy
//! before it does any work. `bench/bench.py` loads it in place of Tollgate's
//! filter (scenarios `wasm-null`, `wasm-pass` and `floor`).
//!
//! Its plugin configuration is one word:
//!
//! - `read_body`: what the architecture requires of a body-routing filter and
//!   nothing more. The headers callback pauses (the plugin needs
//!   `allow_on_headers_stop_iteration: true`, as Tollgate's does), Envoy
//!   buffers the request body until its end, the filter copies it into the VM
//!   once (where the real filter reads the model) and lets the request go on
//!   unchanged. Responses pass through.
//! - `pass` (or empty): every callback returns `Continue` at once; only the
//!   VM's per-stream context and the callbacks themselves are paid for.
//!
//! Any other configuration is refused, so Envoy does not start with a typo.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, Status};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Pass,
    ReadBody,
}

impl Mode {
    fn parse(config: &[u8]) -> Option<Mode> {
        match std::str::from_utf8(config).ok()?.trim() {
            "" | "pass" => Some(Mode::Pass),
            "read_body" => Some(Mode::ReadBody),
            _ => None,
        }
    }
}

// The SDK's `hostcalls::get_buffer` panics on statuses it does not expect;
// this one returns `None` instead.
#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_buffer_bytes(
        buffer_type: BufferType,
        start: usize,
        max_size: usize,
        return_buffer_data: *mut *mut u8,
        return_buffer_size: *mut usize,
    ) -> Status;
    fn proxy_log(level: LogLevel, message_data: *const u8, message_size: usize) -> Status;
}

fn get_buffer(kind: BufferType, size: usize) -> Option<Vec<u8>> {
    let mut data: *mut u8 = std::ptr::null_mut();
    let mut len: usize = 0;
    // SAFETY: on Ok the host hands over `len` bytes it allocated through the
    // SDK's exported `proxy_on_memory_allocate`, which this Vec now owns.
    unsafe {
        match proxy_get_buffer_bytes(kind, 0, size, &mut data, &mut len) {
            Status::Ok if !data.is_null() => Some(Vec::from_raw_parts(data, len, len)),
            _ => None,
        }
    }
}

fn log(level: LogLevel, message: &str) {
    // SAFETY: the host copies the message before returning.
    unsafe {
        proxy_log(level, message.as_ptr(), message.len());
    }
}

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root { mode: Mode::Pass }) });
}}

struct Root {
    mode: Mode,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, size: usize) -> bool {
        let config = if size == 0 {
            Vec::new()
        } else {
            get_buffer(BufferType::PluginConfiguration, size).unwrap_or_default()
        };
        match Mode::parse(&config) {
            Some(mode) => {
                self.mode = mode;
                true
            }
            None => {
                log(
                    LogLevel::Error,
                    "null filter: configuration must be \"pass\" or \"read_body\"",
                );
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http { mode: self.mode }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Http {
    mode: Mode,
}

impl Context for Http {}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        if self.mode == Mode::ReadBody && !end_of_stream {
            Action::Pause
        } else {
            Action::Continue
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.mode == Mode::Pass {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        // Read once, as the real filter does to find the model; then drop it.
        let _ = get_buffer(BufferType::HttpRequestBody, body_size);
        Action::Continue
    }
}
