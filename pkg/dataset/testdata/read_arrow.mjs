// read_arrow.mjs FILE — reads an Arrow IPC file or stream with the
// apache-arrow package and prints one JSON object: {"rows": N, "batches": B,
// "metadata": {key: value}, "columns": [{"name", "type", "nullable"}],
// "data": [{col: value}]}. Int64 values print as numbers when they are safe
// integers (else as strings), lists as arrays, nulls as null.
// The package is resolved from NODE_MODULES_DIR (the repo's
// .cache/node/node_modules, installed by scripts/setup.sh --node).
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [file] = process.argv.slice(2);
if (!file || !process.env.NODE_MODULES_DIR) {
  console.error('usage: NODE_MODULES_DIR=... node read_arrow.mjs FILE');
  process.exit(2);
}
const require = createRequire(path.join(process.env.NODE_MODULES_DIR, 'x.js'));
const arrow = require('apache-arrow');

const table = arrow.tableFromIPC(readFileSync(file));
const plain = (v) => {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
  if (v instanceof arrow.Vector) return Array.from(v, plain);
  if (Array.isArray(v)) return v.map(plain);
  return v;
};
const fields = table.schema.fields;
const data = [];
for (let i = 0; i < table.numRows; i++) {
  const row = table.get(i);
  const obj = {};
  for (const f of fields) obj[f.name] = plain(row[f.name]);
  data.push(obj);
}
console.log(JSON.stringify({
  rows: table.numRows,
  batches: table.batches.length,
  metadata: Object.fromEntries(table.schema.metadata),
  columns: fields.map((f) => ({ name: f.name, type: String(f.type), nullable: f.nullable })),
  data,
}));
