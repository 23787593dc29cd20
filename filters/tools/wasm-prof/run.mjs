// Drives one bench `wasm`-scenario request (OpenAI chat -> Anthropic,
// non-streaming) through the Tollgate module's proxy-wasm callbacks, many
// times, with stub host functions, so that a profiler that names Wasm
// functions (node --cpu-prof, --perf-basic-prof) shows where the module's
// own time goes. See filters/tools/wasm-prof/README.md.
//
//   node run.mjs MODULE.wasm PLUGIN.json [REQUESTS]
import { readFileSync } from "node:fs";

const [wasmPath, configPath, countArg] = process.argv.slice(2);
const REQUESTS = Number(countArg ?? 20000);
const te = new TextEncoder();
const td = new TextDecoder();

// What the bench sends and what the mock answers.
const REQUEST_BODY = te.encode(JSON.stringify({
  model: "anthropic/claude-sonnet-4-5",
  messages: [{ role: "user", content: "Say hello to the benchmark." }],
}));
const RESPONSE_BODY = te.encode(JSON.stringify({
  id: "msg_8f3a2c", type: "message", role: "assistant", model: "claude-sonnet-4-5",
  content: [{ type: "text", text: "Hello! This is a mock answer for the benchmark." }],
  stop_reason: "end_turn", stop_sequence: null,
  usage: { input_tokens: 12, output_tokens: 11, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
}));
const requestHeaders = () => [
  [":authority", "127.0.0.1:10000"], [":path", "/v1/chat/completions"], [":method", "POST"],
  [":scheme", "http"], ["user-agent", "fortio.org/fortio-1.66.5"], ["content-type", "application/json"],
  ["content-length", String(REQUEST_BODY.length)], ["x-tollgate-tenant", "demo"],
  ["x-tollgate-key-id", "demo-key"], ["x-tollgate-models", "*"], ["x-forwarded-proto", "http"],
  ["x-request-id", "5b0c8d2e-6a1f-4f3e-9c1a-2d7e8f901234"],
];
const responseHeaders = () => [
  [":status", "200"], ["content-type", "application/json"], ["content-length", String(RESPONSE_BODY.length)],
  ["request-id", "req_8f3a2c"], ["date", "Mon, 23 Nov 2026 23:00:00 GMT"], ["x-envoy-upstream-service-time", "1"],
];

const env = Object.fromEntries(
  ["OPENAI_1", "OPENAI_2", "ANTHROPIC_1", "ANTHROPIC_2", "MISTRAL_1", "AZURE_1", "GEMINI_1", "BEDROCK_1"]
    .map((k) => [`TG_KEY_${k}`, `mock-${k.toLowerCase().replace("_", "-key-")}`]));

// One stream's state, shared by the route context and its attempt context.
let stream;
let rootConfiguring = null; // the root id being configured (plugin_root_id)
const rootIds = new Map(); // root context id -> root id
let ctxRoot = new Map(); // context id -> root context id
let current = 0; // context being called
const calls = new Map(); // host function -> count per run
let counting = false;
let tracing = false; // list one request's host calls, callback by callback
const trace = [];
const traceArg = (name, a) => {
  const named = { proxy_get_header_map_value: 1, proxy_replace_header_map_value: 1, proxy_remove_header_map_value: 1,
    proxy_add_header_map_value: 1, proxy_get_property: 0, proxy_set_property: 0, proxy_get_shared_data: 0,
    proxy_set_shared_data: 0, proxy_define_metric: 1, proxy_call_foreign_function: 0 }[name];
  if (named === undefined) return "";
  return ` ${JSON.stringify(str(a[named], a[named + 1]))}`;
};

let inst;
const mem = () => new Uint8Array(inst.exports.memory.buffer);
const dv = () => new DataView(inst.exports.memory.buffer);
const str = (p, n) => td.decode(mem().subarray(p, p + n));
let allocs = 0; // proxy_on_memory_allocate calls (a host call returning data enters the VM again)
let callbacks = 0; // proxy_on_* callbacks of the streams
function give(bytes, pp, sp) {
  if (counting && bytes.length) allocs++;
  const p = bytes.length ? inst.exports.proxy_on_memory_allocate(bytes.length) : 0;
  if (bytes.length) mem().set(bytes, p);
  dv().setUint32(pp, p, true);
  dv().setUint32(sp, bytes.length, true);
  return 0;
}
function encodePairs(pairs) {
  const enc = pairs.map(([k, v]) => [te.encode(k), te.encode(v)]);
  let size = 4 + enc.length * 8;
  for (const [k, v] of enc) size += k.length + v.length + 2;
  const out = new Uint8Array(size);
  const d = new DataView(out.buffer);
  d.setUint32(0, enc.length, true);
  let at = 4 + enc.length * 8;
  enc.forEach(([k, v], i) => {
    d.setUint32(4 + i * 8, k.length, true);
    d.setUint32(8 + i * 8, v.length, true);
    out.set(k, at); at += k.length + 1;
    out.set(v, at); at += v.length + 1;
  });
  return out;
}
function decodePairs(p, n) {
  const d = dv();
  const count = d.getUint32(p, true);
  let at = p + 4 + count * 8;
  const pairs = [];
  for (let i = 0; i < count; i++) {
    const kl = d.getUint32(p + 4 + i * 8, true), vl = d.getUint32(p + 8 + i * 8, true);
    const k = str(at, kl); at += kl + 1;
    const v = str(at, vl); at += vl + 1;
    pairs.push([k, v]);
  }
  return pairs;
}
const map = (t) => (t === 0 ? stream.reqHeaders : t === 2 ? stream.respHeaders : []);
const rootIdOf = () => rootIds.get(ctxRoot.get(current) ?? current) ?? rootConfiguring;

const host = {
  proxy_log(level, p, n) { if (level >= 3) console.error(`log ${level}: ${str(p, n)}`); return 0; },
  proxy_get_buffer_bytes(t, start, max, pp, sp) {
    const b = t === 0 ? stream.reqBody : t === 1 ? stream.respBody : t === 7 ? stream.config : null;
    if (!b) return 1;
    return give(b.subarray(start, start + max), pp, sp);
  },
  proxy_set_buffer_bytes(t, start, size, p, n) {
    const nb = mem().slice(p, p + n);
    if (t === 0 || t === 1) {
      const old = t === 0 ? stream.reqBody : stream.respBody;
      const out = new Uint8Array(n + old.length - Math.min(old.length, start + size));
      out.set(old.subarray(0, start)); out.set(nb, start); out.set(old.subarray(start + size), start + n);
      if (t === 0) stream.reqBody = out; else stream.respBody = out;
    }
    return 0;
  },
  proxy_get_header_map_value(t, kp, kn, pp, sp) {
    const k = str(kp, kn);
    const hit = map(t).find(([n]) => n === k);
    return hit ? give(te.encode(hit[1]), pp, sp) : 1;
  },
  proxy_get_header_map_pairs(t, pp, sp) { return give(encodePairs(map(t)), pp, sp); },
  proxy_set_header_map_pairs(t, p, n) {
    const pairs = decodePairs(p, n);
    if (t === 0) stream.reqHeaders = pairs; else if (t === 2) stream.respHeaders = pairs;
    return 0;
  },
  proxy_replace_header_map_value(t, kp, kn, vp, vn) {
    const m = map(t), k = str(kp, kn), v = str(vp, vn);
    const i = m.findIndex(([n]) => n === k);
    if (i >= 0) m[i] = [k, v]; else m.push([k, v]);
    return 0;
  },
  proxy_add_header_map_value(t, kp, kn, vp, vn) { map(t).push([str(kp, kn), str(vp, vn)]); return 0; },
  proxy_remove_header_map_value(t, kp, kn) {
    const m = map(t), k = str(kp, kn);
    for (let i = m.length - 1; i >= 0; i--) if (m[i][0] === k) m.splice(i, 1);
    return 0;
  },
  proxy_get_property(p, n, pp, sp) {
    const path = str(p, n);
    if (path === "plugin_root_id") return give(te.encode(rootIdOf()), pp, sp);
    if (path === "response\0code_details") return give(te.encode("via_upstream"), pp, sp);
    if (path === "upstream\0request_attempt_count") {
      const b = new Uint8Array(8); b[0] = 1; return give(b, pp, sp);
    }
    const v = stream?.props.get(path);
    return v ? give(v, pp, sp) : 1;
  },
  proxy_set_property(p, n, vp, vn) { stream.props.set(str(p, n), mem().slice(vp, vp + vn)); return 0; },
  proxy_get_shared_data() { return 1; },
  proxy_set_shared_data() { return 0; },
  proxy_get_current_time_nanoseconds(p) { dv().setBigUint64(p, process.hrtime.bigint() + 1_700_000_000_000_000_000n, true); return 0; },
  proxy_set_tick_period_milliseconds() { return 0; },
  proxy_define_metric(t, p, n, rp) { dv().setUint32(rp, ++metricIds, true); return 0; },
  proxy_increment_metric() { return 0; },
  proxy_record_metric() { return 0; },
  proxy_call_foreign_function(np, nn, ap, an, rp, rs) { dv().setUint32(rp, 0, true); dv().setUint32(rs, 0, true); return 0; },
  proxy_set_effective_context(c) { current = c; return 0; },
  proxy_send_local_response(status, dp, dn, bp, bn) {
    throw new Error(`local reply ${status}: ${str(bp, bn)}`);
  },
  proxy_http_call(up, un, hp, hn, bp, bn, tp, tn, to, tokp) { dv().setUint32(tokp, 1, true); return 0; },
};
let metricIds = 0;
let hostNs = 0n; // time in the stub host functions
let vmNs = 0n; // time in the callbacks, host functions included
const imports = { env: {}, wasi_snapshot_preview1: {} };
const mod = new WebAssembly.Module(readFileSync(wasmPath));
for (const imp of WebAssembly.Module.imports(mod)) {
  const f = host[imp.name];
  if (imp.module === "env") {
    imports.env[imp.name] = (...a) => {
      if (counting) calls.set(imp.name, (calls.get(imp.name) ?? 0) + 1);
      if (tracing) trace.push(`    ${imp.name}${traceArg(imp.name, a)}`);
      const t = process.hrtime.bigint();
      const r = f ? f(...a) : 0;
      hostNs += process.hrtime.bigint() - t;
      return r;
    };
  }
}
const envBytes = Object.entries(env).map(([k, v]) => te.encode(`${k}=${v}\0`));
imports.wasi_snapshot_preview1 = {
  environ_sizes_get(cp, sp) {
    dv().setUint32(cp, envBytes.length, true);
    dv().setUint32(sp, envBytes.reduce((s, b) => s + b.length, 0), true);
    return 0;
  },
  environ_get(pp, bp) {
    let at = bp;
    envBytes.forEach((b, i) => { dv().setUint32(pp + i * 4, at, true); mem().set(b, at); at += b.length; });
    return 0;
  },
  random_get(p, n) { for (let i = 0; i < n; i++) mem()[p + i] = (Math.random() * 256) | 0; return 0; },
  fd_write(fd, iovs, n, wp) {
    let total = 0;
    for (let i = 0; i < n; i++) {
      const p = dv().getUint32(iovs + i * 8, true), l = dv().getUint32(iovs + i * 8 + 4, true);
      process.stderr.write(str(p, l)); total += l;
    }
    dv().setUint32(wp, total, true);
    return 0;
  },
  proc_exit(c) { throw new Error(`proc_exit ${c}`); },
};
inst = new WebAssembly.Instance(mod, imports);
const x = inst.exports;
x._initialize();

const config = new Uint8Array(readFileSync(configPath));
function configure(rootCtx, rootId) {
  rootIds.set(rootCtx, rootId);
  rootConfiguring = rootId;
  current = rootCtx;
  stream = { config, props: new Map() };
  x.proxy_on_context_create(rootCtx, 0);
  if (!x.proxy_on_vm_start(rootCtx, 0)) throw new Error("vm_start failed");
  if (!x.proxy_on_configure(rootCtx, config.length)) throw new Error(`configure ${rootId} failed`);
}
configure(1, "tollgate");
configure(2, "tollgate_attempt");

let nextCtx = 10;
function request() {
  stream = { reqHeaders: requestHeaders(), reqBody: REQUEST_BODY, props: new Map() };
  const route = nextCtx++, attempt = nextCtx++;
  ctxRoot.set(route, 1); ctxRoot.set(attempt, 2);
  const call = (f, c, ...a) => {
    current = c;
    if (tracing) trace.push(`${c === route ? "route" : "attempt"} ${f}`);
    if (counting) callbacks++;
    const t = process.hrtime.bigint();
    const r = x[f](c, ...a);
    vmNs += process.hrtime.bigint() - t;
    return r;
  };
  call("proxy_on_context_create", route, 1);
  if (call("proxy_on_request_headers", route, stream.reqHeaders.length, 0) !== 1) throw new Error("headers did not pause");
  call("proxy_on_request_body", route, stream.reqBody.length, 1);
  if (!stream.reqHeaders.some(([n, v]) => n === "x-tollgate-cluster" && v === "anthropic")) {
    throw new Error(`not routed: ${JSON.stringify(stream.reqHeaders)}`);
  }
  call("proxy_on_context_create", attempt, 2);
  call("proxy_on_request_headers", attempt, stream.reqHeaders.length, 0);
  call("proxy_on_request_body", attempt, stream.reqBody.length, 1);
  stream.respHeaders = responseHeaders();
  stream.respBody = RESPONSE_BODY;
  call("proxy_on_response_headers", attempt, stream.respHeaders.length, 0);
  call("proxy_on_response_headers", route, stream.respHeaders.length, 0);
  call("proxy_on_response_body", route, stream.respBody.length, 1);
  call("proxy_on_done", attempt); call("proxy_on_delete", attempt);
  call("proxy_on_log", route); call("proxy_on_done", route); call("proxy_on_delete", route);
  ctxRoot.delete(route); ctxRoot.delete(attempt);
  return stream;
}

// Warm up (V8 tiers up hot functions), then measure.
for (let i = 0; i < 2000; i++) request();
const last = request();
const answer = JSON.parse(td.decode(last.respBody));
if (answer.object !== "chat.completion") throw new Error(`not translated: ${td.decode(last.respBody)}`);
tracing = process.env.TRACE === "1";
request();
tracing = false;
if (trace.length) console.log(trace.join("\n"));
counting = true;
calls.clear();
// The module's own time per request (callbacks minus the stub host
// functions), per batch of 500 requests; the median of the batches resists
// the other processes of a busy machine.
const batches = [];
for (let done = 0; done < REQUESTS; done += 500) {
  vmNs = 0n; hostNs = 0n;
  for (let i = 0; i < 500; i++) request();
  batches.push(Number(vmNs - hostNs) / 500 / 1000);
}
counting = false;
batches.sort((a, b) => a - b);
const median = batches[batches.length >> 1];
console.log(`${batches.length * 500} requests: module ${median.toFixed(2)} us per request (median of batches; ` +
  `min ${batches[0].toFixed(2)}), stub host excluded`);
const total = [...calls.values()].reduce((a, b) => a + b, 0);
console.log(`VM crossings per request: ${((total + allocs + callbacks) / REQUESTS).toFixed(1)} ` +
  `(${(callbacks / REQUESTS).toFixed(1)} callbacks, ${(total / REQUESTS).toFixed(1)} host calls, ` +
  `${(allocs / REQUESTS).toFixed(1)} allocations for returned data)`);
console.log(`host calls per request: ${(total / REQUESTS).toFixed(1)}`);
for (const [name, n] of [...calls].sort((a, b) => b[1] - a[1])) {
  console.log(`  ${(n / REQUESTS).toFixed(1).padStart(5)}  ${name}`);
}
