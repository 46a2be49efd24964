// Runs models exported by `lnverify export` in ONNX Runtime (onnxruntime-node) and compares
// their outputs with lnverify's double evaluation (`lnverify eval --bits 53 --json`).
//
//   node onnx_runtime_check.js ORT_DIR TOL SEED MODEL.onnx MODEL.json EVAL.json [...]
//
// ORT_DIR is the onnxruntime-node package folder. The inputs are the format's random inputs
// of SEED (docs/spec/format.md, "Random numbers": SplitMix64 streams named after each
// input; float: standard normals, Box-Muller, cos then sin; index: floor(uniform * range)),
// the ones `lnverify eval --seed SEED` evaluates. For each model it prints the largest
// difference of each output relative to that output's largest magnitude, and exits 1 when
// one exceeds TOL. A float input is fed in the type the model declares (float32, or float64
// for `export --dtype float64`).
'use strict';
const fs = require('fs');

const MASK = (1n << 64n) - 1n;

function fnv1a64(text) {
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.from(text, 'utf8')) h = ((h ^ BigInt(b)) * 0x100000001b3n) & MASK;
  return h;
}

class SplitMix64 {
  constructor(seed, name) {
    this.state = (BigInt(seed) ^ fnv1a64(name)) & MASK;
    this.spare = null;
  }
  next() {
    this.state = (this.state + 0x9e3779b97f4a7c15n) & MASK;
    let z = this.state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
    return z ^ (z >> 31n);
  }
  uniform() {
    return Number(this.next() >> 11n) * 2 ** -53;
  }
  normal() {
    if (this.spare !== null) {
      const s = this.spare;
      this.spare = null;
      return s;
    }
    const u1 = 1 - this.uniform();
    const u2 = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u1));
    this.spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  }
}

function randomInputs(ort, session, model, seed) {
  const declared = {};
  for (const m of session.inputMetadata) declared[m.name] = m.type;
  const feeds = {};
  for (const input of model.inputs || []) {
    const rng = new SplitMix64(seed, input.name);
    const count = input.shape.reduce((a, b) => a * b, 1);
    if (input.dtype === 'index') {
      const ids = new BigInt64Array(count);
      for (let i = 0; i < count; ++i) ids[i] = BigInt(Math.floor(rng.uniform() * input.range));
      feeds[input.name] = new ort.Tensor('int64', ids, input.shape);
    } else {
      const type = declared[input.name] === 'float64' ? 'float64' : 'float32';
      const x = type === 'float64' ? new Float64Array(count) : new Float32Array(count);
      for (let i = 0; i < count; ++i) x[i] = rng.normal();
      feeds[input.name] = new ort.Tensor(type, x, input.shape);
    }
  }
  return feeds;
}

async function main() {
  const [ortDir, tolText, seedText, ...files] = process.argv.slice(2);
  const ort = require(ortDir);
  const tol = Number(tolText);
  let worst = 0;
  let failed = 0;
  for (let k = 0; k + 2 < files.length; k += 3) {
    const [onnxPath, modelPath, evalPath] = files.slice(k, k + 3);
    const model = JSON.parse(fs.readFileSync(modelPath, 'utf8'));
    const ref = JSON.parse(fs.readFileSync(evalPath, 'utf8')).outputs;
    const session = await ort.InferenceSession.create(onnxPath, {intraOpNumThreads: 1, interOpNumThreads: 1});
    const results = await session.run(randomInputs(ort, session, model, seedText));
    const parts = [];
    let modelWorst = 0;
    for (const name of session.outputNames) {
      const want = ref[name].data;
      const got = results[name].data;
      if (got.length !== want.length) throw new Error(`${onnxPath}: output ${name} has ${got.length} values, expected ${want.length}`);
      let scale = 1e-30;
      for (const v of want) scale = Math.max(scale, Math.abs(v));
      let diff = 0;
      for (let i = 0; i < want.length; ++i) diff = Math.max(diff, Math.abs(Number(got[i]) - want[i]));
      modelWorst = Math.max(modelWorst, diff / scale);
      parts.push(`${name} ${(diff / scale).toExponential(2)}`);
    }
    worst = Math.max(worst, modelWorst);
    const ok = modelWorst <= tol;
    failed += ok ? 0 : 1;
    console.log(`${ok ? 'agrees' : 'DIFFERS'}  ${onnxPath}: ${parts.join(', ')}`);
  }
  console.log(`ONNX Runtime ${require(ortDir + '/package.json').version}: ${files.length / 3 - failed} of ${files.length / 3} models agree with lnverify's double evaluation within ${tol} (worst ${worst.toExponential(2)})`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e.message || e);
  process.exit(2);
});
