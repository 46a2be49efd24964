#!/usr/bin/env node
// Times ONNX models side by side in ONNX Runtime (onnxruntime-node): the first model is
// the reference (the original), the others its folds. One configuration per call:
//
//   node bench/ort_bench.js --seq N --threads T --repeats R [--profile-runs P] [--vocab V] \
//        [--image S] LABEL=MODEL.onnx LABEL=MODEL.onnx ...
//
// The input is one row of N token ids (int64, batch 1, seeded, below V), or with --image S
// one S×S RGB image (float32 [1, 3, S, S], seeded values in [-1, 1]; N is then only the
// token count the report shows). After a warm-up
// run of each, the models run interleaved (A, B, C, A, B, C, ...) R times; each model's
// wall time per run is summarised as median, min and max, and divided by the reference's
// median. Each model also runs P + 1 times in a separate session with ORT's profiler on; the
// first (warm-up) run is dropped and, per run, the kernel time of the norm nodes is summed:
// nodes whose op is a norm (LayerNormalization, SimplifiedLayerNormalization,
// RMSNormalization, Skip*), and the nodes of a decomposed RMSNorm (`fold` names them
// `<LayerNorm node>/RMS/...`, and ORT keeps those names for unfused nodes). The per-run
// median of that sum is divided by the reference's, for all norms and for the replaced ones
// only (the reference's LayerNorms that a fold's `/RMS/` nodes are named after). The norm op types and counts the
// optimised graph ran are printed, so that ORT's fusions show.
//
// The residual Adds: a norm kernel whose input an `Add` of the optimised graph computes
// gets that Add's kernel time too (`residual_us`: norms plus the Adds feeding them), so a
// fold whose RMSNorm takes the residual Add inside (SkipSimplifiedLayerNormalization) is
// compared with the original's norm plus its separate Add.
//
// `by_op`: per op type of the optimised graph, the median kernel µs per profiled run and
// the node count, so a whole-model difference can be traced to its kernels.
//
// One JSON line per model goes to stdout. Graph optimisations are ORT's default (all).
// onnxruntime-node is required from ${LNV_ORT_DIR:-$HOME/.cache/lnverify/onnxruntime}.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

function fail(message) {
  process.stderr.write(`ort_bench: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { seq: 128, threads: 1, repeats: 10, profileRuns: 3, vocab: 30522, image: 0, models: [] };
  const numeric = { '--seq': 'seq', '--threads': 'threads', '--repeats': 'repeats',
                    '--profile-runs': 'profileRuns', '--vocab': 'vocab', '--image': 'image' };
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] in numeric) {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v < (argv[i - 1] === '--profile-runs' ? 0 : 1))
        fail(`${argv[i - 1]}: expected a whole number, got '${argv[i]}'`);
      opts[numeric[argv[i - 1]]] = v;
    } else {
      const eq = argv[i].indexOf('=');
      if (eq <= 0) fail(`expected LABEL=MODEL.onnx, got '${argv[i]}'`);
      const file = argv[i].slice(eq + 1);
      if (!fs.existsSync(file)) fail(`${file}: no such file`);
      opts.models.push({ label: argv[i].slice(0, eq), file });
    }
  }
  if (opts.models.length < 1) fail('no model given');
  return opts;
}

function loadOrt() {
  const dir = process.env.LNV_ORT_DIR || path.join(os.homedir(), '.cache', 'lnverify', 'onnxruntime');
  try {
    return require(path.join(dir, 'node_modules', 'onnxruntime-node'));
  } catch (e) {
    fail(`onnxruntime-node not found under ${dir}/node_modules (bash scripts/setup.sh installs it): ${e.message}`);
  }
}

// Token ids from a fixed linear congruential sequence: the same input for every model.
function tokenIds(ort, seq, vocab) {
  const ids = new BigInt64Array(seq);
  let s = 12345;
  for (let i = 0; i < seq; ++i) {
    s = (s * 1103515245 + 12345) % 2147483648;
    ids[i] = BigInt(s % vocab);
  }
  return new ort.Tensor('int64', ids, [1, seq]);
}

// An image from the same sequence, scaled to [-1, 1].
function image(ort, size) {
  const px = new Float32Array(3 * size * size);
  let s = 12345;
  for (let i = 0; i < px.length; ++i) {
    s = (s * 1103515245 + 12345) % 2147483648;
    px[i] = s / 1073741824 - 1;
  }
  return new ort.Tensor('float32', px, [1, 3, size, size]);
}

function sessionOptions(threads, profile, optimizedFile) {
  const o = { intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
              enableProfiling: profile, profileFilePrefix: path.join(os.tmpdir(), `ort_bench_${process.pid}`) };
  if (optimizedFile) o.optimizedModelFilePath = optimizedFile;
  return o;
}

// --- the optimised graph's nodes (onnx.proto: ModelProto.graph 7, GraphProto.node 1,
// NodeProto input 1, output 2, name 3, op_type 4) ---------------------------------------
function readVarint(buf, pos) {
  let value = 0n, shift = 0n;
  for (;;) {
    const b = buf[pos++];
    value |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return [value, pos];
    shift += 7n;
  }
}

function protoFields(buf) {
  const out = [];
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) { let v; [v, pos] = readVarint(buf, pos); out.push([field, v]); }
    else if (wire === 2) { let len; [len, pos] = readVarint(buf, pos); out.push([field, buf.subarray(pos, pos + Number(len))]); pos += Number(len); }
    else if (wire === 5) { pos += 4; }
    else if (wire === 1) { pos += 8; }
    else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

// norm node name -> the name of the Add computing its first input, in the graph at `file`.
function residualAdds(file) {
  const graph = protoFields(fs.readFileSync(file)).find(([f]) => f === 7)[1];
  const nodes = [];
  for (const [f, v] of protoFields(graph)) {
    if (f !== 1) continue;
    const n = { inputs: [], outputs: [], name: '', op: '' };
    for (const [nf, nv] of protoFields(v)) {
      if (nf === 1) n.inputs.push(nv.toString());
      else if (nf === 2) n.outputs.push(nv.toString());
      else if (nf === 3) n.name = nv.toString();
      else if (nf === 4) n.op = nv.toString();
    }
    nodes.push(n);
  }
  const producer = new Map();
  for (const n of nodes) for (const o of n.outputs) producer.set(o, n);
  const out = new Map();
  for (const n of nodes) {
    if (!NORM_OPS.has(n.op) || n.inputs.length === 0) continue;
    const p = producer.get(n.inputs[0]);
    if (p && p.op === 'Add') out.set(n.name, p.name);
  }
  return out;
}

function quantile(sorted, q) {
  const at = (sorted.length - 1) * q, lo = Math.floor(at), hi = Math.ceil(at);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
}

function summary(values) {
  const s = [...values].sort((a, b) => a - b);
  return { median: quantile(s, 0.5), min: s[0], max: s[s.length - 1] };
}

const NORM_OPS = new Set(['LayerNormalization', 'SimplifiedLayerNormalization', 'RMSNormalization',
                          'SkipLayerNormalization', 'SkipSimplifiedLayerNormalization']);

function isNormNode(name, op) { return NORM_OPS.has(op) || name.includes('/RMS/'); }

// Per profiled run (warm-up dropped), the µs of all norm kernels and of the replaced ones
// (`replaced`: the LayerNorm nodes a fold rewrote, and every `/RMS/` node); the ops seen.
function normTimes(trace, replaced, residual) {
  const runs = trace.filter((e) => e.cat === 'Session' && e.name === 'model_run').sort((a, b) => a.ts - b.ts);
  const perRun = runs.map(() => 0), replacedPerRun = runs.map(() => 0), residualPerRun = runs.map(() => 0);
  const ops = {};
  // The Adds feeding replaced norms.
  const feeding = new Set();
  for (const [norm, add] of residual) if (replaced.has(norm) || norm.includes('/RMS/')) feeding.add(add);
  // Per op type, µs per run and the node count (`by_op`): where a whole-model difference goes.
  const perOp = {}, counts = {};
  for (const e of trace) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
    const node = e.name.slice(0, -'_kernel_time'.length);
    const op = (e.args && e.args.op_name) || '';
    const k = runs.findIndex((r) => e.ts >= r.ts && e.ts <= r.ts + r.dur);
    if (k < 0) continue;
    const type = op || '?';
    if (!perOp[type]) perOp[type] = runs.map(() => 0);
    perOp[type][k] += e.dur;
    if (k === 1) counts[type] = (counts[type] || 0) + 1;
    const norm = isNormNode(node, op);
    if (!norm && !feeding.has(node)) continue;
    if (feeding.has(node)) {
      residualPerRun[k] += e.dur;
      if (k === 0) ops['Add (residual)'] = (ops['Add (residual)'] || 0) + 1;
      continue;
    }
    perRun[k] += e.dur;
    if (replaced.has(node) || node.includes('/RMS/')) {
      replacedPerRun[k] += e.dur;
      residualPerRun[k] += e.dur;
    }
    if (k === 0) ops[op] = (ops[op] || 0) + 1;
  }
  // by_op: the median over the profiled runs (warm-up dropped).
  const byOp = {};
  for (const [op, v] of Object.entries(perOp)) byOp[op] = { us: summary(v.slice(1)).median, nodes: counts[op] || 0 };
  return { perRun: perRun.slice(1), replacedPerRun: replacedPerRun.slice(1),
           residualPerRun: residualPerRun.slice(1), ops, byOp };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const ort = loadOrt();
  const input = opts.image ? image(ort, opts.image) : tokenIds(ort, opts.seq, opts.vocab);
  const feedsFor = (session) => ({ [session.inputNames[0]]: input });

  const sessions = [];
  for (const m of opts.models) sessions.push(await ort.InferenceSession.create(m.file, sessionOptions(opts.threads, false)));
  const times = opts.models.map(() => []);
  for (const s of sessions) await s.run(feedsFor(s));
  for (let r = 0; r < opts.repeats; ++r) {
    for (let k = 0; k < sessions.length; ++k) {
      const feeds = feedsFor(sessions[k]);
      const t0 = process.hrtime.bigint();
      await sessions[k].run(feeds);
      times[k].push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  for (const s of sessions) if (s.release) await s.release();
  sessions.length = 0;

  const norms = [];
  const traces = [];
  const residuals = [];
  for (const m of opts.models) {
    if (opts.profileRuns === 0) { traces.push(null); residuals.push(null); continue; }
    const optimized = path.join(os.tmpdir(), `ort_bench_${process.pid}.optimized.onnx`);
    const s = await ort.InferenceSession.create(m.file, sessionOptions(opts.threads, true, optimized));
    residuals.push(residualAdds(optimized));
    fs.unlinkSync(optimized);
    for (const f of fs.readdirSync(os.tmpdir()))
      if (f.startsWith(`ort_bench_${process.pid}.optimized.onnx`)) fs.unlinkSync(path.join(os.tmpdir(), f));
    for (let r = 0; r <= opts.profileRuns; ++r) await s.run(feedsFor(s));
    s.endProfiling();  // writes <profileFilePrefix>_<date>.json (onnxruntime-node returns nothing)
    const prefix = `ort_bench_${process.pid}_`;
    const written = fs.readdirSync(os.tmpdir()).filter((f) => f.startsWith(prefix) && f.endsWith('.json'));
    if (written.length !== 1) throw new Error(`expected one profile ${prefix}*.json in ${os.tmpdir()}, found ${written.length}`);
    const traceFile = path.join(os.tmpdir(), written[0]);
    traces.push(JSON.parse(fs.readFileSync(traceFile, 'utf8')));
    fs.unlinkSync(traceFile);
    if (s.release) await s.release();
  }
  // The LayerNorms the folds replaced: `fold` names an RMSNorm's nodes `<LayerNorm>/RMS/...`.
  const replaced = new Set();
  for (const t of traces) {
    for (const e of t || []) if (e.cat === 'Node' && e.name.includes('/RMS/')) replaced.add(e.name.split('/RMS/')[0]);
  }
  traces.forEach((t, k) => norms.push(t ? normTimes(t, replaced, residuals[k]) : null));

  const ref = summary(times[0]);
  const refNorm = norms[0] ? summary(norms[0].perRun) : null;
  const refReplaced = norms[0] ? summary(norms[0].replacedPerRun) : null;
  const refResidual = norms[0] ? summary(norms[0].residualPerRun) : null;
  opts.models.forEach((m, k) => {
    const t = summary(times[k]);
    const n = norms[k] ? summary(norms[k].perRun) : null;
    const rn = norms[k] ? summary(norms[k].replacedPerRun) : null;
    const rr = norms[k] ? summary(norms[k].residualPerRun) : null;
    process.stdout.write(JSON.stringify({
      model: m.label, seq: opts.seq, threads: opts.threads, repeats: opts.repeats,
      ms: t, ratio: t.median / ref.median,
      norm_us: n, norm_ratio: n && refNorm ? n.median / refNorm.median : null,
      replaced_us: rn, replaced_ratio: rn && refReplaced ? rn.median / refReplaced.median : null,
      residual_us: rr, residual_ratio: rr && refResidual ? rr.median / refResidual.median : null,
      replaced_layernorms: replaced.size,
      norm_ops: norms[k] ? norms[k].ops : null,
      by_op: norms[k] ? norms[k].byOp : null,
    }) + '\n');
  });
}

main().catch((e) => {
  process.stderr.write(`ort_bench: ${e.message}\n`);
  process.exit(1);
});
