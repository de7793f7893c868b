// Runs one model with ONNX Runtime (onnxruntime-node) on the inputs that
// `reference.py pb2raw` left in TMP, and writes TMP/outputs.json + out_K.bin
// (K in the session's output order, which is the graph's) for `reference.py raw2pb`.
//
//   node run_ort.js MODEL.onnx TMP [disabled|basic|extended|all]
//
// ORT_NODE names the onnxruntime-node package (a directory); default: require's search.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(process.env.ORT_NODE || 'onnxruntime-node');

const TYPED = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array,
};

async function main() {
  const [model, tmp, level = 'disabled'] = process.argv.slice(2);
  if (!model || !tmp) {
    console.error('usage: node run_ort.js MODEL.onnx TMP [disabled|basic|extended|all]');
    process.exit(2);
  }
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: level,
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
  });
  const feeds = {};
  for (const e of JSON.parse(fs.readFileSync(path.join(tmp, 'inputs.json'), 'utf8'))) {
    const T = TYPED[e.dtype];
    if (!T) throw new Error(`unsupported input dtype ${e.dtype}`);
    const buf = fs.readFileSync(path.join(tmp, e.file));
    const data = new T(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
    feeds[e.name] = new ort.Tensor(e.dtype === 'bool' ? 'bool' : e.dtype, data, e.dims);
  }
  const results = await session.run(feeds);
  const entries = [];
  session.outputNames.forEach((name, k) => {
    const t = results[name];
    if (!TYPED[t.type]) throw new Error(`unsupported output type ${t.type} for ${name}`);
    const file = `out_${k}.bin`;
    const d = t.data;
    fs.writeFileSync(path.join(tmp, file), Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    entries.push({ name, dtype: t.type, dims: Array.from(t.dims), file });
  });
  fs.writeFileSync(path.join(tmp, 'outputs.json'), JSON.stringify(entries, null, 1));
  console.log(`${path.basename(path.dirname(model))}: ` +
              entries.map((e) => `${e.name} ${e.dtype}[${e.dims}]`).join(', '));
}

main().catch((err) => { console.error(err); process.exit(1); });
