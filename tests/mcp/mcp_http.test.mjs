// `gyre mcp --http` through the official SDK's streamable HTTP client transport, plus the transport
// rules the SDK does not exercise (sessions, origin, key, methods), with raw fetch. Started by
// run.sh, which exports GYRE_MCP_URL (a server with --api-key GYRE_MCP_KEY).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const URL_MCP = process.env.GYRE_MCP_URL;
const KEY = process.env.GYRE_MCP_KEY;
assert.ok(URL_MCP && KEY, 'run through tests/mcp/run.sh');
const auth = { Authorization: `Bearer ${KEY}` };

test('the SDK client over streamable HTTP: handshake, tools, a call, an error', async () => {
  const transport = new StreamableHTTPClientTransport(new URL(URL_MCP), { requestInit: { headers: auth } });
  const client = new Client({ name: 'gyre-mcp-http-test', version: '1.0.0' });
  await client.connect(transport);
  assert.equal(client.getServerVersion().name, 'gyre');
  assert.ok(transport.sessionId, 'the server assigned a session');
  const { tools } = await client.listTools();
  assert.ok(tools.some((t) => t.name === 'advise'));
  const r = await client.callTool({ name: 'verify_ops', arguments: { op: 'swiglu', seed: 3 } });
  assert.equal(r.isError, false, r.content[0].text);
  assert.ok(r.structuredContent.checks.every((c) => c.pass));
  await assert.rejects(client.callTool({ name: 'verify_parallel', arguments: { plan: 'nope' } }),
                       (e) => e instanceof McpError && e.code === -32602);
  await client.ping();
  await transport.terminateSession();
  await client.close();
});

async function post(body, headers = {}) {
  return fetch(URL_MCP, { method: 'POST', headers: { 'content-type': 'application/json',
    accept: 'application/json, text/event-stream', ...auth, ...headers }, body: JSON.stringify(body) });
}
const init = { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };

test('transport rules: key, origin, session, methods, batches', async () => {
  assert.equal((await post(init, { Authorization: 'Bearer wrong' })).status, 401);
  assert.equal((await post(init, { Origin: 'http://evil.example' })).status, 403);
  assert.equal((await post(init, { Origin: 'http://localhost:3000' })).status, 200);
  const r = await post(init);
  assert.equal(r.status, 200);
  const sid = r.headers.get('mcp-session-id');
  assert.match(sid, /^[0-9a-f]{32}$/);
  assert.equal((await r.json()).result.protocolVersion, '2025-11-25');
  const ping = { jsonrpc: '2.0', id: 2, method: 'ping' };
  assert.equal((await post(ping)).status, 400);  // no session
  assert.equal((await post(ping, { 'mcp-session-id': 'f'.repeat(32) })).status, 404);
  assert.equal((await post(ping, { 'mcp-session-id': sid, 'mcp-protocol-version': '1999-01-01' })).status, 400);
  const ok = await post(ping, { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
  assert.equal(ok.status, 200);
  assert.deepEqual((await ok.json()).result, {});
  const note = await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': sid });
  assert.equal(note.status, 202);
  assert.equal((await post([ping], { 'mcp-session-id': sid })).status, 400);
  const get = await fetch(URL_MCP, { headers: { ...auth, 'mcp-session-id': sid } });
  assert.equal(get.status, 405);
  const del = await fetch(URL_MCP, { method: 'DELETE', headers: { ...auth, 'mcp-session-id': sid } });
  assert.equal(del.status, 200);
  assert.equal((await post(ping, { 'mcp-session-id': sid })).status, 404);  // ended
});
