// The conformance matrix's server on the TypeScript SDK v2 (@modelcontextprotocol/server, served on
// node:http through @modelcontextprotocol/node): the same five tools as every server of the matrix,
// each execution counted, the counts read at GET /count.
//
//   node server.mjs MODE    MODE: handler (createMcpHandler: 2026-07-28, JSON answers unless a tool
//                           speaks first, and the 2025 era served stateless, SSE answers) |
//                           sse (the same, every 2026-07-28 answer an event stream) |
//                           stateful (2026-07-28 by createMcpHandler, the 2025 era routed by
//                           isLegacyRequest to a transport with session ids, as the SDK documents)
//
// It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { McpServer, ProtocolError, createMcpHandler, isLegacyRequest } from '@modelcontextprotocol/server';
import { NodeStreamableHTTPServerTransport, toNodeHandler, toWebRequest } from '@modelcontextprotocol/node';
import { z } from 'zod';

const mode = process.argv[2] ?? 'handler';
const counts = {};
const ran = (tool) => { counts[tool] = (counts[tool] ?? 0) + 1; };
const text = (s) => ({ content: [{ type: 'text', text: s }] });

function mcpServer() {
  const server = new McpServer({ name: 'conformance-typescript-v2', version: '1' });
  server.registerTool('search', { description: 'read-only search', inputSchema: z.object({ query: z.string() }) },
    async ({ query }) => { ran('search'); return text(`found ${query}`); });
  server.registerTool('charge', { description: 'charges once per call', inputSchema: z.object({ amount: z.number() }) },
    async ({ amount }) => { ran('charge'); return text(`charged ${amount}`); });
  server.registerTool('fail', { description: 'a tool error (isError)' },
    async () => { ran('fail'); return { ...text('the tool failed'), isError: true }; });
  server.registerTool('reject', { description: 'a JSON-RPC error' }, async () => text('unreachable'));
  server.registerTool('bulk', { description: 'an answer of the given size', inputSchema: z.object({ size: z.number() }) },
    async ({ size }) => { ran('bulk'); return text('x'.repeat(size)); });
  // McpServer turns whatever a tool throws into an isError result (v2 as v1); a JSON-RPC error answer
  // comes from the protocol layer beneath it, so `reject` is answered there, before McpServer's handler.
  const handlers = server.server._requestHandlers;
  const callTool = handlers.get('tools/call');
  handlers.set('tools/call', async (request, ctx) => {
    if (request.params?.name === 'reject') {
      ran('reject');
      throw new ProtocolError(-32602, 'rejected by the server');
    }
    return callTool(request, ctx);
  });
  return server;
}

const sessions = new Map();

async function sessionTransport(req) {
  const id = req.headers['mcp-session-id'];
  if (id && sessions.has(id)) return sessions.get(id);
  const transport = new NodeStreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (sid) => { sessions.set(sid, transport); },
  });
  transport.onclose = () => { if (transport.sessionId) sessions.delete(transport.sessionId); };
  await mcpServer().connect(transport);
  return transport;
}

const modern = createMcpHandler(mcpServer, {
  responseMode: mode === 'sse' ? 'sse' : 'auto',
  legacy: mode === 'stateful' ? 'reject' : 'stateless',
});
const served = toNodeHandler(modern);

async function handle(req, res) {
  if (req.url === '/count') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(counts));
    return;
  }
  if (!req.url.startsWith('/mcp')) {
    res.writeHead(404).end();
    return;
  }
  if (mode === 'stateful') {
    // The body read once, then handed on parsed, as the SDK's isLegacyRequest documents.
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body;
    try { body = raw ? JSON.parse(raw) : undefined; } catch { body = undefined; }
    if (await isLegacyRequest(await toWebRequest(req, body), body)) {
      await (await sessionTransport(req)).handleRequest(req, res, body);
      return;
    }
    await served(req, res, body);
    return;
  }
  await served(req, res);
}

if (!['handler', 'sse', 'stateful'].includes(mode)) {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
const http = createServer((req, res) => {
  handle(req, res).catch((err) => {
    console.error(err);
    if (!res.headersSent) res.writeHead(500).end();
  });
});
http.listen(0, '127.0.0.1', () => { console.log(`READY ${http.address().port}`); });
