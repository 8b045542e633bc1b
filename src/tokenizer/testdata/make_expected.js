// Regenerates an expected-ids file for tokenizer_golden_test.cc from a reference HF tokenizer.
//
//   npm i @anush008/tokenizers@0.6.0   # HF tokenizers 0.22.2 (Rust) as a Node addon, offline
//   node make_expected.js <tokenizer.json> <texts.json> > qwen3_expected.json
//
// texts.json is a JSON list of strings (the current one is the "text" fields of
// qwen3_expected.json). Each output line is {"text", "ids", "decoded", "decoded_skip_special"},
// encoded without post-processor special tokens (gyre's Encode never adds BOS/EOS).
const {Tokenizer} = require('@anush008/tokenizers');
const fs = require('fs');
(async () => {
  const t = Tokenizer.fromFile(process.argv[2]);
  const texts = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
  const out = [];
  for (const text of texts) {
    const ids = (await t.encode(text, null, {addSpecialTokens: false})).getIds();
    out.push({text, ids, decoded: await t.decode(ids, false),
              decoded_skip_special: await t.decode(ids, true)});
  }
  process.stdout.write('[\n' + out.map(o => JSON.stringify(o)).join(',\n') + '\n]\n');
})();
