// Speculative decoding with MTP drafts through the official OpenAI Node client: the trained
// glm5_mini served with --speculative-config '{"method":"mtp","num_speculative_tokens":2}' gives
// the greedy text of the same model served without it (chat and completions, streamed and not),
// its /metrics count drafts proposed and accepted, and a seeded sampled request is reproducible.
// Started by run.sh, which exports GYRE_URL_MTP, GYRE_URL_MTP_PLAIN and GYRE_MODEL_NAME.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const URL_MTP = process.env.GYRE_URL_MTP;
const URL_PLAIN = process.env.GYRE_URL_MTP_PLAIN;
const MODEL = process.env.GYRE_MODEL_NAME;
assert.ok(URL_MTP && URL_PLAIN && MODEL, 'run through tests/serve/run.sh');

const spec = new OpenAI({ baseURL: `${URL_MTP}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const plain = new OpenAI({ baseURL: `${URL_PLAIN}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

async function counter(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function streamedText(client, req) {
  let text = '';
  for await (const c of await client.completions.create({ ...req, stream: true })) text += c.choices[0].text;
  return text;
}

test('MTP drafts: greedy completions equal the plain server, streamed and not', async () => {
  for (const prompt of ['The history of the city', 'In the morning the', 'He said that the']) {
    const req = { model: MODEL, prompt, max_tokens: 48, temperature: 0 };
    const want = await plain.completions.create(req);
    const got = await spec.completions.create(req);
    assert.equal(got.choices[0].text, want.choices[0].text, prompt);
    assert.equal(got.usage.completion_tokens, want.usage.completion_tokens);
    assert.equal(await streamedText(spec, req), want.choices[0].text, `${prompt} (streamed)`);
  }
});

test('MTP drafts: greedy chat equals the plain server', async () => {
  const req = { model: MODEL, messages: [{ role: 'user', content: 'Tell me about rivers.' }], max_tokens: 40,
    temperature: 0 };
  const want = await plain.chat.completions.create(req);
  const got = await spec.chat.completions.create(req);
  assert.equal(got.choices[0].message.content, want.choices[0].message.content);
  assert.equal(got.choices[0].finish_reason, want.choices[0].finish_reason);
});

test('MTP drafts: /metrics count drafts proposed and accepted; the plain server none', async () => {
  const drafts = await counter(URL_MTP, 'gyre_spec_decode_num_draft_tokens_total');
  const accepted = await counter(URL_MTP, 'gyre_spec_decode_num_accepted_tokens_total');
  assert.ok(drafts > 0, `drafts ${drafts}`);
  assert.ok(accepted > 0 && accepted <= drafts, `accepted ${accepted} of ${drafts}`);
  // Per draft position (k = 2): positions 0 and 1, accepted at 1 never above accepted at 0.
  const text = await (await fetch(`${URL_MTP}/metrics`)).text();
  const perPos = (name, pos) => {
    const m = text.match(new RegExp(`^${name}\\{[^}]*position="${pos}"\\} (\\S+)$`, 'm'));
    return m ? Number(m[1]) : NaN;
  };
  const acc0 = perPos('gyre_spec_decode_num_accepted_tokens_per_pos_total', 0);
  const acc1 = perPos('gyre_spec_decode_num_accepted_tokens_per_pos_total', 1);
  assert.ok(acc0 >= acc1 && acc0 + acc1 === accepted, `per position ${acc0} + ${acc1} vs ${accepted}`);
  assert.ok(perPos('gyre_spec_decode_num_draft_tokens_per_pos_total', 0) > 0);
  const none = await counter(URL_PLAIN, 'gyre_spec_decode_num_draft_tokens_total');
  assert.ok(none === 0 || Number.isNaN(none), `plain server drafts ${none}`);
});

test('MTP drafts: a seeded sampled request is reproducible', async () => {
  const req = { model: MODEL, prompt: 'Once upon a time', max_tokens: 32, temperature: 0.8, seed: 1234 };
  const a = await spec.completions.create(req);
  const b = await spec.completions.create(req);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.equal(a.usage.completion_tokens, 32);
});
