// Image inputs (docs/vision.md) through the official OpenAI Node client. Started by run.sh, which
// exports GYRE_URL_VISION: a server of a copy of tests/fixtures/glm5_tiny whose config.json moves
// the image placeholder ids (154830 / 154854 / 154831, outside the tiny 1024-token vocabulary) to
// 1011 / 1010 / 1012, started with --allowed-local-media-path GYRE_MEDIA_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const URL_VISION = process.env.GYRE_URL_VISION;
const MEDIA_DIR = process.env.GYRE_MEDIA_DIR;
const MODEL = process.env.GYRE_MODEL_NAME;
assert.ok(URL_VISION && MEDIA_DIR && MODEL, 'run through tests/serve/run.sh');

const client = new OpenAI({ baseURL: `${URL_VISION}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const png = readFileSync(`${MEDIA_DIR}/rgb_140x112.png`);
const jpg = readFileSync(`${MEDIA_DIR}/rgb_140x112.jpg`);
const dataUrl = (mime, buf) => `data:${mime};base64,${buf.toString('base64')}`;
// 140 × 112 is not resized (at least 16 tokens' worth of pixels) and fills a 140 × 112 canvas:
// (112/14) × (140/14) patches, 2×2 merged: 4 × 5 = 20 image tokens, + begin/end of image.
const IMAGE_TOKENS = 20 + 2;

function chat(parts, extra = {}) {
  return client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: parts }], max_tokens: 4, temperature: 0, ...extra,
  });
}

async function expectApiError(status, fn) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    assert.equal(e.status, status, `status ${e.status}: ${e.message}`);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

// A PNG whose IHDR (valid CRC) declares w × h RGB pixels, followed by a tiny IDAT and IEND.
function pngDeclaring(w, h) {
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([sig, chunk('IHDR', ihdr), chunk('IDAT', Buffer.from([0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01])),
    chunk('IEND', Buffer.alloc(0))]);
}

test('a chat request with a data-URL PNG succeeds and its usage counts the image tokens', async () => {
  const text = { type: 'text', text: 'Describe the picture.' };
  const plain = await chat([text]);
  const withImage = await chat([text, { type: 'image_url', image_url: { url: dataUrl('image/png', png) } }]);
  assert.equal(withImage.choices.length, 1);
  assert.ok(withImage.usage.completion_tokens >= 1);
  assert.equal(withImage.usage.prompt_tokens, plain.usage.prompt_tokens + IMAGE_TOKENS);
  assert.equal(withImage.usage.total_tokens, withImage.usage.prompt_tokens + withImage.usage.completion_tokens);
});

test('the same pixels as JPEG count the same tokens; two images count twice', async () => {
  const one = await chat([{ type: 'image_url', image_url: { url: dataUrl('image/jpeg', jpg) } }]);
  const two = await chat([{ type: 'image_url', image_url: { url: dataUrl('image/jpeg', jpg) } },
    { type: 'image_url', image_url: { url: dataUrl('image/png', png) } }]);
  assert.equal(two.usage.prompt_tokens, one.usage.prompt_tokens + IMAGE_TOKENS);
});

test('a request with an image is deterministic under greedy decoding (no prefix-cache poisoning)', async () => {
  const parts = [{ type: 'image_url', image_url: { url: dataUrl('image/png', png) } }, { type: 'text', text: 'Go on.' }];
  const a = await chat(parts, { max_tokens: 6 });
  const b = await chat(parts, { max_tokens: 6 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.choices[0].message.reasoning_content, b.choices[0].message.reasoning_content);
});

// The embedding cache (--image-cache-mb, on by default): a repeated image is encoded once.
async function imageCacheCounters() {
  const text = await (await fetch(`${URL_VISION}/metrics`)).text();
  const value = (name) => {
    const m = text.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm'));
    assert.ok(m, `${name} missing from /metrics`);
    return Number(m[1]);
  };
  return { hits: value('gyre_image_cache_hits_total'), misses: value('gyre_image_cache_misses_total'),
    entries: value('gyre_image_cache_entries') };
}

test('a repeated image is encoded once (the embedding cache) and answers the same', async () => {
  // Bytes no other test sends: the PNG with one byte appended after IEND (decoders stop at IEND).
  const fresh = Buffer.concat([png, Buffer.from([0x2a])]);
  const parts = [{ type: 'image_url', image_url: { url: dataUrl('image/png', fresh) } }, { type: 'text', text: 'Again.' }];
  const before = await imageCacheCounters();
  const a = await chat(parts, { max_tokens: 6 });
  const mid = await imageCacheCounters();
  assert.equal(mid.misses, before.misses + 1);
  assert.equal(mid.hits, before.hits);
  assert.equal(mid.entries, before.entries + 1);
  const b = await chat(parts, { max_tokens: 6 });
  const after = await imageCacheCounters();
  assert.equal(after.hits, mid.hits + 1);
  assert.equal(after.misses, mid.misses);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
});

test('/tokenize counts the image tokens a chat request would use', async () => {
  const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl('image/jpeg', jpg) } },
    { type: 'text', text: 'and' }, { type: 'image_url', image_url: { url: dataUrl('image/png', png) } }] }];
  const tokenize = async (msgs) => {
    const r = await fetch(`${URL_VISION}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: msgs }) });
    return { status: r.status, body: await r.json() };
  };
  const t = await tokenize(messages);
  assert.equal(t.status, 200, JSON.stringify(t.body));
  const answer = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1, temperature: 0 });
  assert.equal(t.body.count, answer.usage.prompt_tokens);
  assert.equal(t.body.tokens.filter((id) => id === 1010).length, 2 * 20);  // image_token_id, 20 per image
  const bad = await tokenize([{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl('image/png', png.subarray(0, 200)) } }] }]);
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'messages[0].content[0].image_url');
});

test('a corrupt image gets a 400 naming the field', async () => {
  const bad = Buffer.from(png.subarray(0, 200));
  const e = await expectApiError(400, () => chat([{ type: 'text', text: 'hi' },
    { type: 'image_url', image_url: { url: dataUrl('image/png', bad) } }]));
  assert.equal(e.param, 'messages[0].content[1].image_url');
  assert.match(e.message, /corrupt PNG/);
  const notImage = await expectApiError(400, () => chat([{ type: 'image_url', image_url: { url: dataUrl('image/png', Buffer.from('GIF89a....')) } }]));
  assert.match(notImage.message, /only PNG and JPEG/);
  const notBase64 = await expectApiError(400, () => chat([{ type: 'image_url', image_url: { url: 'data:image/png;base64,@@@@' } }]));
  assert.equal(notBase64.param, 'messages[0].content[0].image_url');
});

test('a too-large image (declared 30000 × 30000) gets a 400 before any decoding', async () => {
  const e = await expectApiError(400, () => chat([{ type: 'image_url', image_url: { url: dataUrl('image/png', pngDeclaring(30000, 30000)) } }]));
  assert.equal(e.param, 'messages[0].content[0].image_url');
  assert.match(e.message, /over the limit/);
});

test('http(s) image URLs are refused with a 400; file:// only inside the allowed folder', async () => {
  const h = await expectApiError(400, () => chat([{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }]));
  assert.match(h.message, /not fetched/);
  const inside = await chat([{ type: 'image_url', image_url: { url: `file://${MEDIA_DIR}/rgb_140x112.png` } }]);
  const viaData = await chat([{ type: 'image_url', image_url: { url: dataUrl('image/png', png) } }]);
  assert.equal(inside.usage.prompt_tokens, viaData.usage.prompt_tokens);
  const outside = await expectApiError(400, () => chat([{ type: 'image_url', image_url: { url: 'file:///etc/passwd' } }]));
  assert.match(outside.message, /outside the allowed local media path/);
});

test('images are refused in assistant messages and by /v1/responses-style endpoints', async () => {
  const e = await expectApiError(400, () => client.chat.completions.create({
    model: MODEL, max_tokens: 2,
    messages: [{ role: 'assistant', content: [{ type: 'image_url', image_url: { url: dataUrl('image/png', png) } }] },
      { role: 'user', content: 'hi' }],
  }));
  assert.match(e.message, /text only/);
});
