// `gyre mcp` through the official MCP TypeScript SDK client over stdio. Started by run.sh, which
// exports GYRE_BIN (the gyre binary) and GYRE_ROOT (the repository, the server's working folder).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const GYRE = process.env.GYRE_BIN;
const ROOT = process.env.GYRE_ROOT;
assert.ok(GYRE && ROOT, 'run through tests/mcp/run.sh');
const TMP = mkdtempSync(join(tmpdir(), 'gyre-mcp-'));
let client;

before(async () => {
  const transport = new StdioClientTransport({ command: GYRE, args: ['mcp'], cwd: ROOT, stderr: 'ignore' });
  client = new Client({ name: 'gyre-mcp-test', version: '1.0.0' });
  await client.connect(transport);
});
after(async () => { await client.close(); });

test('the handshake names the server and the tools carry JSON schemas', async () => {
  assert.equal(client.getServerVersion().name, 'gyre');
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const n of ['verify_ops', 'verify_parallel', 'verify_trace', 'bench_model', 'generate_trace', 'trace_serve_window',
                   'analyze', 'advise',
                   'skeletons', 'gate', 'compare', 'diff', 'inspect', 'plan'])
    assert.ok(names.includes(n), `missing tool ${n}`);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.equal(t.inputSchema.additionalProperties, false, t.name);
  }
  const vp = tools.find((t) => t.name === 'verify_parallel');
  assert.deepEqual(vp.inputSchema.required, ['plan']);
  assert.ok(vp.inputSchema.properties.plan.enum.includes('tp=2'));
});

test('verify_ops returns structured checks that pass', async () => {
  const r = await client.callTool({ name: 'verify_ops', arguments: { op: 'rmsnorm', seed: 7 } });
  assert.equal(r.isError, false, r.content[0].text);
  const checks = r.structuredContent.checks;
  assert.ok(checks.length > 0);
  assert.ok(checks.every((c) => c.op === 'rmsnorm' && c.pass === true && c.rel_l2 < c.tolerance));
});

test('bad arguments are protocol errors naming the argument, and the server lives on', async () => {
  await assert.rejects(client.callTool({ name: 'verify_parallel', arguments: { plan: 'tp=3' } }),
                       (e) => e instanceof McpError && e.code === -32602 && /plan/.test(e.message));
  await assert.rejects(client.callTool({ name: 'verify_ops', arguments: { seed: 'seven' } }),
                       (e) => e instanceof McpError && /seed/.test(e.message));
  await assert.rejects(client.callTool({ name: 'verify_ops', arguments: { frobnicate: 1 } }),
                       (e) => e instanceof McpError && /frobnicate/.test(e.message));
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => e instanceof McpError);
  await client.ping();
});

test('plan: a layout that fits, one that does not (isError with the reason), and gpus required', async () => {
  const config = 'bench/configs/glm5_next_fulldepth_32experts.json';
  const ok = await client.callTool({ name: 'plan', arguments: { config, gpus: 2, gpu_memory: '141G', tp: 2, weights: 'fp8' } });
  assert.equal(ok.isError, false, ok.content[0].text);
  assert.equal(ok.structuredContent.fits, true);
  assert.equal(ok.structuredContent.tp, 2);
  assert.equal(ok.structuredContent.weights_dtype, 'fp8');
  assert.ok(ok.structuredContent.stages[0].weights.total > 0);
  const no = await client.callTool({ name: 'plan', arguments: { config, gpus: 1, gpu_memory: '1G' } });
  assert.equal(no.isError, true);
  assert.match(no.content[0].text, /shard further/);
  await assert.rejects(client.callTool({ name: 'plan', arguments: { config } }),
                       (e) => e instanceof McpError && e.code === -32602 && /gpus/.test(e.message));
});

test('a failing command is a tool result with isError and its message', async () => {
  const r = await client.callTool({ name: 'inspect', arguments: { model: '/nonexistent' } });
  assert.equal(r.isError, true);
  assert.match(r.content[0].text, /cannot open \/nonexistent/);
});

test('trace a generation, then analyze and advise it; the trace is a resource', async () => {
  const trace = join(TMP, 'gen.json');
  const g = await client.callTool({ name: 'generate_trace',
    arguments: { model: 'tests/fixtures/glm5_tiny', prompt: 'The sea', max_tokens: 4, trace } });
  assert.equal(g.isError, false, g.content[0].text);
  assert.ok(existsSync(trace));
  const a = await client.callTool({ name: 'analyze', arguments: { trace, overlap: 'op,step' } });
  assert.equal(a.isError, false, a.content[0].text);
  assert.ok(a.structuredContent.ops.length > 0);
  assert.ok(a.structuredContent.wall_us > 0);
  assert.ok(a.structuredContent.overlap.ratio >= 0);
  const adv = await client.callTool({ name: 'advise', arguments: { input: trace } });
  assert.equal(adv.isError, false, adv.content[0].text);
  assert.ok(Array.isArray(adv.structuredContent.findings) && adv.structuredContent.findings.length > 0);
  const { resources } = await client.listResources();
  const uri = resources.map((r) => r.uri).find((u) => u.endsWith('/gen.json'));
  assert.ok(uri, 'the written trace is listed');
  const read = await client.readResource({ uri });
  assert.ok(JSON.parse(read.contents[0].text).traceEvents.length > 0);
  await assert.rejects(client.readResource({ uri: 'file:///etc/passwd' }), (e) => e instanceof McpError);
});

test('a trace window of a running server, then analyze it', async () => {
  const url = process.env.GYRE_SERVE_URL;
  assert.ok(url, 'run.sh starts a server');
  const w = await client.callTool({ name: 'trace_serve_window', arguments: { url, seconds: 0.3 } });
  assert.equal(w.isError, false, w.content[0].text);
  const trace = w.structuredContent.path;
  assert.ok(existsSync(trace), trace);
  const a = await client.callTool({ name: 'analyze', arguments: { trace } });
  assert.equal(a.isError, false, a.content[0].text);
  const bad = await client.callTool({ name: 'trace_serve_window', arguments: { url: 'http://127.0.0.1:1', seconds: 0.3 } });
  assert.equal(bad.isError, true);
  assert.match(bad.content[0].text, /cannot connect/);
});

test('skeletons are searchable', async () => {
  const r = await client.callTool({ name: 'skeletons', arguments: { op: 'kda.chunk' } });
  assert.equal(r.isError, false);
  const list = r.structuredContent.result;
  assert.ok(list.length > 0 && list.every((s) => s.ops.includes('kda.chunk')));
});

test('a cancelled call is killed and the server keeps answering', async () => {
  const ctl = new AbortController();
  const t0 = Date.now();
  const p = client.callTool({ name: 'bench_model',
    arguments: { model: 'tests/fixtures/glm5_tiny', batches: '1', steps: 100000, repeats: 50 } },
    undefined, { signal: ctl.signal, timeout: 600_000 });
  setTimeout(() => ctl.abort(), 300);
  await assert.rejects(p);
  await client.ping();
  // The child is gone ("[1]" keeps pgrep's own shell from matching; the SDK sent notifications/cancelled; the server killed its process group).
  let alive = true;
  for (let i = 0; i < 50 && alive; ++i) {
    await new Promise((r) => setTimeout(r, 100));
    try { execSync('pgrep -f "bench model --model tests/fixtures/glm5_tiny --batches [1] --steps 100000"'); }
    catch { alive = false; }
  }
  assert.equal(alive, false, 'the cancelled bench_model child is still running');
  const r = await client.callTool({ name: 'skeletons', arguments: { signal: 'graph' } });
  assert.equal(r.isError, false);
  assert.ok(Date.now() - t0 < 60_000);
});
