// Runs one model with onnxruntime-node (the independent peer bench/setup_peers.sh installs) for module_test's
// check that ExportModelForInferencing writes a model another runtime loads and agrees with.
//   node run_with_onnxruntime.js ORT_NODE_DIR MODEL INPUT_NAME INPUT_FILE DIMS OUTPUT_NAME OUTPUT_FILE
// INPUT_FILE / OUTPUT_FILE hold raw little-endian float32; DIMS is comma-separated. Prints the output's dims.
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [ortDir, model, inputName, inputFile, dims, outputName, outputFile] = process.argv.slice(2);
  const ort = require(path.join(ortDir, 'node_modules', 'onnxruntime-node'));
  const session = await ort.InferenceSession.create(model);
  const bytes = fs.readFileSync(inputFile);
  const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  const shape = dims.split(',').map(Number);
  const results = await session.run({[inputName]: new ort.Tensor('float32', data, shape)});
  const output = results[outputName];
  if (!output) throw new Error(`no output ${outputName}`);
  fs.writeFileSync(outputFile, Buffer.from(output.data.buffer, output.data.byteOffset, output.data.byteLength));
  console.log(output.dims.join(','));
}

main().catch((error) => {
  console.error(String(error && error.stack || error));
  process.exit(1);
});
