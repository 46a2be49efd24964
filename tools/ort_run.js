#!/usr/bin/env node
// Runs an ONNX model in ONNX Runtime (onnxruntime-node) on inputs stored as ONNX
// TensorProto files and writes each output as a TensorProto file, the format of ONNX's
// test data folders (test_data_set_0/input_0.pb ...), which lnverify reads with
// onnx_import::load_tensor_pb.
//
//   node tools/ort_run.js MODEL.onnx OUT_DIR [--threads N] [--level L] [--optimized FILE] INPUT.pb...
//
// --optimized FILE saves the graph ORT runs after its optimisations (its fusions), as ONNX.
// --level L sets ORT's graph optimization level: disabled, basic, extended or all (ORT's
// default, all, adds com.microsoft.nchwc layout ops specific to the CPU that runs it).
//
// Inputs are fed to the model's inputs in order (or by the TensorProto's name, when it
// names one of them); output k is written to OUT_DIR/output_<k>.pb, named as the graph
// output, in its own type (float32, float16, ...) as raw little-endian data. onnxruntime-node is required from
// ${LNV_ORT_DIR:-$HOME/.cache/lnverify/onnxruntime}/node_modules (bash scripts/setup.sh --tests).
// Exit 2 with a message on bad arguments or a missing runtime; ORT's own errors exit 1.
'use strict';
const fs = require('fs');
const path = require('path');
const os = require('os');

function fail(message) {
  process.stderr.write(`ort_run: ${message}\n`);
  process.exit(2);
}

// --- TensorProto: the fields used here (onnx.proto: dims 1, data_type 2, float_data 4,
// int32_data 5, int64_data 7, name 8, raw_data 9, double_data 10) --------------------------
const FLOAT = 1, INT32 = 6, INT64 = 7, FLOAT16 = 10, DOUBLE = 11;

function readVarint(buf, pos) {
  let value = 0n, shift = 0n;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const b = buf[pos++];
    value |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return [value, pos];
    shift += 7n;
  }
}

function decodeTensor(buf) {
  const t = { dims: [], dataType: 0, name: '', raw: null, floats: [], ints: [], doubles: [] };
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) {
      let v;
      [v, pos] = readVarint(buf, pos);
      if (field === 1) t.dims.push(Number(BigInt.asIntN(64, v)));
      else if (field === 2) t.dataType = Number(v);
      else if (field === 5 || field === 7) t.ints.push(BigInt.asIntN(64, v));
    } else if (wire === 2) {
      let len;
      [len, pos] = readVarint(buf, pos);
      const body = buf.subarray(pos, pos + Number(len));
      if (body.length !== Number(len)) throw new Error('truncated field');
      pos += Number(len);
      if (field === 8) t.name = body.toString('utf8');
      else if (field === 9) t.raw = Buffer.from(body);
      else if (field === 4) for (let i = 0; i + 4 <= body.length; i += 4) t.floats.push(body.readFloatLE(i));
      else if (field === 10) for (let i = 0; i + 8 <= body.length; i += 8) t.doubles.push(body.readDoubleLE(i));
      else if (field === 1 || field === 5 || field === 7) {
        for (let p = 0; p < body.length;) {
          let v;
          [v, p] = readVarint(body, p);
          if (field === 1) t.dims.push(Number(BigInt.asIntN(64, v)));
          else t.ints.push(BigInt.asIntN(64, v));
        }
      }
    } else if (wire === 5) pos += 4;
    else if (wire === 1) pos += 8;
    else throw new Error(`unsupported wire type ${wire}`);
  }
  return t;
}

function toOrtTensor(ort, t) {
  const n = t.dims.reduce((a, b) => a * b, 1);
  const raw = t.raw;
  switch (t.dataType) {
    case FLOAT: {
      const data = raw ? new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + 4 * n)) : Float32Array.from(t.floats);
      return new ort.Tensor('float32', data, t.dims);
    }
    case DOUBLE: {
      const data = raw ? new Float64Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + 8 * n)) : Float64Array.from(t.doubles);
      return new ort.Tensor('float64', data, t.dims);
    }
    case INT64: {
      const data = raw ? new BigInt64Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + 8 * n)) : BigInt64Array.from(t.ints);
      return new ort.Tensor('int64', data, t.dims);
    }
    case INT32: {
      const data = raw ? new Int32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + 4 * n)) : Int32Array.from(t.ints.map(Number));
      return new ort.Tensor('int32', data, t.dims);
    }
    case FLOAT16: {  // the IEEE half bits: raw, or one per int32_data entry
      const data = raw ? new Uint16Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + 2 * n)) : Uint16Array.from(t.ints.map(Number));
      return new ort.Tensor('float16', data, t.dims);
    }
    default:
      throw new Error(`tensor '${t.name}': data type ${t.dataType} is not supported (float, float16, double, int32, int64)`);
  }
}

function varint(v) {
  const out = [];
  let x = BigInt.asUintN(64, BigInt(v));
  do {
    let b = Number(x & 0x7fn);
    x >>= 7n;
    if (x) b |= 0x80;
    out.push(b);
  } while (x);
  return Buffer.from(out);
}

function field(number, wire) { return varint((number << 3) | wire); }

function encodeTensor(name, tensor) {
  const types = { float32: [FLOAT, 4], float16: [FLOAT16, 2], float64: [DOUBLE, 8], int64: [INT64, 8], int32: [INT32, 4] };
  if (!(tensor.type in types)) throw new Error(`output '${name}': type ${tensor.type} cannot be written`);
  const [dataType] = types[tensor.type];
  const data = tensor.data;
  const raw = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const parts = [];
  for (const d of tensor.dims) parts.push(field(1, 0), varint(d));
  parts.push(field(2, 0), varint(dataType));
  const nameBytes = Buffer.from(name, 'utf8');
  parts.push(field(8, 2), varint(nameBytes.length), nameBytes);
  parts.push(field(9, 2), varint(raw.length), raw);
  return Buffer.concat(parts);
}

// --- the run -----------------------------------------------------------------------------
async function main(argv) {
  const usage = 'usage: node tools/ort_run.js MODEL.onnx OUT_DIR [--threads N] [--level L] [--optimized FILE] INPUT.pb...';
  const args = [];
  let threads = 1;
  let optimized = null;
  let level = null;
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--threads') {
      threads = Number(argv[++i]);
      if (!Number.isInteger(threads) || threads < 1) fail(`--threads: expected a whole number >= 1, got '${argv[i]}'`);
    } else if (argv[i] === '--level') {
      level = argv[++i];
      if (!['disabled', 'basic', 'extended', 'all'].includes(level))
        fail(`--level: expected disabled, basic, extended or all, got '${level}'`);
    } else if (argv[i] === '--optimized') {
      optimized = argv[++i];
      if (!optimized) fail('--optimized: expected a file name');
    } else args.push(argv[i]);
  }
  if (args.length < 2) fail(usage);
  const [model, outDir, ...inputs] = args;
  const ortDir = process.env.LNV_ORT_DIR || path.join(os.homedir(), '.cache', 'lnverify', 'onnxruntime');
  let ort;
  try {
    ort = require(path.join(ortDir, 'node_modules', 'onnxruntime-node'));
  } catch (e) {
    fail(`onnxruntime-node not found under ${ortDir}/node_modules (bash scripts/setup.sh --tests installs it): ${e.message}`);
  }
  if (!fs.existsSync(model)) fail(`${model}: no such file`);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    ...(optimized ? { optimizedModelFilePath: optimized } : {}),
    ...(level ? { graphOptimizationLevel: level } : {}),
  });
  if (inputs.length !== session.inputNames.length)
    fail(`${model} has ${session.inputNames.length} inputs (${session.inputNames.join(', ')}), got ${inputs.length} files`);
  const feeds = {};
  inputs.forEach((file, k) => {
    let t;
    try {
      t = decodeTensor(fs.readFileSync(file));
    } catch (e) {
      fail(`${file}: not a TensorProto: ${e.message}`);
    }
    const name = session.inputNames.includes(t.name) ? t.name : session.inputNames[k];
    feeds[name] = toOrtTensor(ort, t);
  });
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  session.outputNames.forEach((name, k) => {
    fs.writeFileSync(path.join(outDir, `output_${k}.pb`), encodeTensor(name, results[name]));
  });
  process.stdout.write(`ort_run: ${model}: ${session.outputNames.length} output(s) to ${outDir} ` +
                       `(onnxruntime-node ${ort.env.versions ? ort.env.versions.common : ''}, ${threads} thread(s))\n`);
}

main(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`ort_run: ${e.message}\n`);
  process.exit(1);
});
