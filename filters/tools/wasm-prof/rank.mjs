// Ranks the module's functions in a V8 CPU profile of run.mjs
// (node --cpu-prof): self and inclusive time per request, counting only
// samples whose leaf is Wasm code (the stub host functions are left out).
//
//   node rank.mjs PROFILE.cpuprofile REQUESTS [TOP]
//
// REQUESTS is what the profiled run drove, warm-up included (run.mjs's
// count + 2001). Names come from the module's name section: profile a build
// without `strip` (see README.md).
import { readFileSync } from "node:fs";

const [file, requestsArg, topArg] = process.argv.slice(2);
const requests = Number(requestsArg);
const top = Number(topArg ?? 40);
const profile = JSON.parse(readFileSync(file));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const isWasm = (n) => n.callFrame.url.startsWith("wasm");
// Rust's legacy mangling, shortened: `_ZN13tollgate_core4plan4plan17h…E` → `tollgate_core::plan::plan`.
const name = (s) => s.replace(/^_ZN/, "").replace(/17h[0-9a-f]{16}E$/, "").replace(/\d+/g, "::")
  .replace(/^::/, "").replace(/\$LT\$/g, "<").replace(/\$GT\$/g, ">").replace(/\$u20\$/g, " ")
  .replace(/\$RF\$/g, "&").replace(/\$C\$/g, ",").replace(/\.\./g, "::").slice(0, 140);

const self = new Map();
const incl = new Map();
let wasm = 0;
let total = 0;
profile.samples.forEach((id, i) => {
  const d = profile.timeDeltas[i] ?? 0;
  total += d;
  const leaf = byId.get(id);
  if (!isWasm(leaf)) return;
  wasm += d;
  const k = name(leaf.callFrame.functionName);
  self.set(k, (self.get(k) ?? 0) + d);
  const seen = new Set();
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const n = byId.get(cur);
    if (!isWasm(n)) continue;
    const f = name(n.callFrame.functionName);
    if (!seen.has(f)) {
      seen.add(f);
      incl.set(f, (incl.get(f) ?? 0) + d);
    }
  }
});
const us = (v) => (v / requests).toFixed(2).padStart(7);
console.log(`profiled: ${(total / requests).toFixed(1)} us per request, of which Wasm code ${(wasm / requests).toFixed(1)} us`);
console.log("   self    incl  function (us per request)");
for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`${us(v)} ${us(incl.get(k) ?? 0)}  ${k}`);
}
console.log("\n   incl  function, by inclusive time");
for (const [k, v] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${us(v)}  ${k}`);
