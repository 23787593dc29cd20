// Runs a Rust test binary built for wasm32-wasip1 in Node.js's V8 (the
// engine of Envoy's Wasm runtime) through WASI, so that code compiled only
// for Wasm (the scanner's SIMD masks, scan/block.rs) is tested where it
// runs. The exit code is the tests'.
//
//   node run.mjs TESTS.wasm [libtest arguments...]
import { readFileSync } from "node:fs";
import { WASI } from "node:wasi";

const [path, ...args] = process.argv.slice(2);
const wasi = new WASI({ version: "preview1", args: ["tests", ...args], env: {}, returnOnExit: true });
const module = new WebAssembly.Module(readFileSync(path));
process.exitCode = wasi.start(new WebAssembly.Instance(module, wasi.getImportObject()));
