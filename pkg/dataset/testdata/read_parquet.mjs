// read_parquet.mjs FILE — reads a Parquet file with DuckDB (@duckdb/node-api)
// and prints one JSON object: {"rows": N, "columns": [{"name", "type",
// "null"}], "compression": [...], "kv": {key: value}, "data": [{col: value}]}.
// Column types are DuckDB's DESCRIBE output; values are DuckDB's JSON
// rendering (lists as arrays, NULL as null), BIGINTs as numbers when they
// are safe integers.
// The packages are resolved from NODE_MODULES_DIR (the repo's
// .cache/node/node_modules, installed by scripts/setup.sh --node).
import { createRequire } from 'node:module';
import path from 'node:path';

const [file] = process.argv.slice(2);
if (!file || !process.env.NODE_MODULES_DIR) {
  console.error('usage: NODE_MODULES_DIR=... node read_parquet.mjs FILE');
  process.exit(2);
}
const require = createRequire(path.join(process.env.NODE_MODULES_DIR, 'x.js'));
const { DuckDBInstance } = require('@duckdb/node-api');

const lit = (s) => "'" + s.replaceAll("'", "''") + "'";
const instance = await DuckDBInstance.create(':memory:');
const conn = await instance.connect();
const q = async (sql) => (await conn.runAndReadAll(sql)).getRowObjectsJson();

const src = `read_parquet(${lit(file)})`;
const describe = await q(`DESCRIBE SELECT * FROM ${src}`);
const count = await q(`SELECT count(*) AS n FROM ${src}`);
const compression = await q(`SELECT DISTINCT compression FROM parquet_metadata(${lit(file)}) ORDER BY 1`);
const kv = await q(`SELECT decode(key) AS k, decode(value) AS v FROM parquet_kv_metadata(${lit(file)})`);
// DuckDB renders BIGINT as JSON strings; print safe integers as numbers.
const bigints = describe.filter((c) => c.column_type === 'BIGINT').map((c) => c.column_name);
const data = (await q(`SELECT * FROM ${src}`)).map((row) => {
  for (const c of bigints) {
    if (typeof row[c] === 'string' && Number.isSafeInteger(Number(row[c]))) row[c] = Number(row[c]);
  }
  return row;
});
console.log(JSON.stringify({
  rows: Number(count[0].n),
  columns: describe.map((c) => ({ name: c.column_name, type: c.column_type, null: c.null })),
  compression: compression.map((c) => c.compression),
  kv: Object.fromEntries(kv.map((r) => [r.k, r.v])),
  data,
}));
