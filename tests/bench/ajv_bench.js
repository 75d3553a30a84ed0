// ajv_bench.js: ajv (draft-07, fail-fast as its default) on the same corpus as bench_jsonschema,
// printing lines in the same format. Usage: node ajv_bench.js AJV_DIR CORPUS_DIR [SECONDS].
'use strict';
const fs = require('fs');
const path = require('path');

const [ajvDir, corpus, secondsArg] = process.argv.slice(2);
const Ajv = require(path.join(ajvDir, 'node_modules', 'ajv'));
const seconds = Number(secondsArg || 1);
const ajv = new Ajv({ allErrors: false, strict: false });

function now() {
  return Number(process.hrtime.bigint()) / 1e9;
}

const names = fs.readdirSync(corpus)
  .filter((f) => f.endsWith('.schema.json'))
  .map((f) => f.slice(0, -'.schema.json'.length))
  .sort();
for (const name of names) {
  const schema = JSON.parse(fs.readFileSync(path.join(corpus, name + '.schema.json'), 'utf8'));
  const text = fs.readFileSync(path.join(corpus, name + '.instances.json'), 'utf8');
  const instances = JSON.parse(text);
  const validate = ajv.compile(schema);
  const results = instances.map((x) => (validate(x) ? '1' : '0')).join('');
  const valid = results.split('').filter((c) => c === '1').length;
  let total = 0;
  let sink = 0;
  let t0 = now();
  let t = t0;
  while (t - t0 < seconds) {
    for (let rep = 0; rep < 64; rep++) {
      for (let i = 0; i < instances.length; i++) {
        sink += validate(instances[i]) ? 1 : 0;
      }
      total += instances.length;
    }
    t = now();
  }
  const perS = total / (t - t0);
  let parsed = 0;
  t0 = now();
  t = t0;
  while (t - t0 < seconds) {
    for (let rep = 0; rep < 16; rep++) {
      const v = JSON.parse(text);
      for (let i = 0; i < v.length; i++) {
        sink += validate(v[i]) ? 1 : 0;
      }
      parsed += v.length;
    }
    t = now();
  }
  console.log(`case=${name} instances=${instances.length} valid=${valid} ` +
    `validate_per_s=${perS.toFixed(0)} parse_validate_per_s=${(parsed / (t - t0)).toFixed(0)} ` +
    `results=${results}` + (sink < 0 ? ' ' : ''));
}
