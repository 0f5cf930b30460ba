// How plain-scalars.jsonl was recorded: node record.cjs JS_YAML_DIR YAML_DIR > plain-scalars.jsonl
// Each line: [text, js-yaml's reading, yaml's reading] of the document `k: <text>`, a reading being
// [kind, value] with kind text | number | bool | null | inf (value: the sign) | nan | error (not a
// document with one plain scalar at k).
const jsyaml = require(process.argv[2]);
const YAML = require(process.argv[3]);

const curated = `1_000 0b101 0x_1F 0o1_7 1_0.5 0777 0o17 0x1F 0X1F 0O17 0xff 0xFF 0o777 0o8 0x 0o 0b 0b1 0b_1
yes Yes YES yEs no No NO on On ON off Off OFF y Y n N true True TRUE tRue false False FALSE null Null NULL nULL ~
1:20 1:20.5 190:20:30 1:60 -1:20 +1:20 12:30:45 1:2 0:20
1e3 1E3 1e+3 1e-3 1.0e3 1.0e+3 1.5e-3 .5e3 5.e3 +.5 .5 -.5 1. +1. -1. 1.2.3 . .. 01.5 00.5 0.0 -0.0 +0.0
1_000.5 1__0 _1 1_ 0_ 00 0 -0 +0 +12 -12 08 09 010 0010 -010 +010
.inf -.inf +.inf .Inf .INF .NaN .nan .NAN -.nan +.nan .iNf
2001-12-14 2001-12-14T21:59:43.10-05:00 2001-1-1 2024-02-30
= << === =x
1e 1e+ 0xg 123456789012345678901234567890 9007199254740993 1.7976931348623157e308 1e309 -1e309
1,000 1.000,5 $1 1% 0x1F_ 0x_ 0b_ 0o_ 1e3_ 1_e3`.split(/\s+/);
// then every text of 1 to 3 characters of this alphabet
const alphabet = '01789_.:+-xobeEa';
let generated = [''];
const all = [];
for (let n = 1; n <= 3; n++) {
  generated = generated.flatMap((prefix) => [...alphabet].map((c) => prefix + c));
  all.push(...generated);
}
const forms = [...new Set([...curated, ...all])];

function reading(load, text) {
  let doc;
  try { doc = load('k: ' + text + '\n'); } catch (e) { return ['error', null]; }
  if (doc === null || typeof doc !== 'object' || Object.keys(doc).length !== 1 || !('k' in doc)) return ['error', null];
  const v = doc.k;
  if (v === null) return ['null', null];
  if (typeof v === 'boolean') return ['bool', v];
  if (typeof v === 'string') return ['text', v];
  if (typeof v === 'number') {
    if (Number.isNaN(v)) return ['nan', null];
    if (!Number.isFinite(v)) return ['inf', v > 0 ? 1 : -1];
    return ['number', v];
  }
  return ['other', String(v)];
}

for (const text of forms) {
  const row = [text, reading((t) => jsyaml.load(t), text), reading((t) => YAML.parse(t), text)];
  process.stdout.write(JSON.stringify(row) + '\n');
}
