// The conformance matrix's server on the TypeScript SDK (@modelcontextprotocol/sdk): McpServer and
// StreamableHTTPServerTransport on node:http, the same five tools as every server of the matrix,
// each execution counted, the counts read at GET /count.
//
//   node server.mjs MODE    MODE: sse | json (stateless, as the SDK's stateless example) |
//                           stateful (session ids) | resumable (session ids and an event store)
//
// It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const mode = process.argv[2] ?? 'sse';
const counts = {};
const ran = (tool) => { counts[tool] = (counts[tool] ?? 0) + 1; };
const text = (s) => ({ content: [{ type: 'text', text: s }] });

function mcpServer() {
  const server = new McpServer({ name: 'conformance-typescript', version: '1' });
  server.registerTool('search', { description: 'read-only search', inputSchema: { query: z.string() } },
    async ({ query }) => { ran('search'); return text(`found ${query}`); });
  server.registerTool('charge', { description: 'charges once per call', inputSchema: { amount: z.number() } },
    async ({ amount }) => { ran('charge'); return text(`charged ${amount}`); });
  server.registerTool('fail', { description: 'a tool error (isError)' },
    async () => { ran('fail'); return { ...text('the tool failed'), isError: true }; });
  server.registerTool('reject', { description: 'a JSON-RPC error' }, async () => text('unreachable'));
  server.registerTool('bulk', { description: 'an answer of the given size', inputSchema: { size: z.number() } },
    async ({ size }) => { ran('bulk'); return text('x'.repeat(size)); });
  // McpServer turns whatever a tool throws into an isError result; a JSON-RPC error answer comes from
  // the protocol layer beneath it, so `reject` is answered there, before McpServer's own handler.
  const handlers = server.server._requestHandlers;
  const callTool = handlers.get('tools/call');
  handlers.set('tools/call', async (request, extra) => {
    if (request.params?.name === 'reject') {
      ran('reject');
      throw new McpError(-32602, 'rejected by the server');
    }
    return callTool(request, extra);
  });
  return server;
}

// The EventStore interface of the SDK (its InMemoryEventStore lives in its examples, not its API).
class EventStore {
  constructor() { this.events = []; }
  async storeEvent(streamId, message) {
    const eventId = `${streamId}_${this.events.length}`;
    this.events.push({ eventId, streamId, message });
    return eventId;
  }
  async getStreamIdForEventId(eventId) {
    return this.events.find((e) => e.eventId === eventId)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const at = this.events.findIndex((e) => e.eventId === lastEventId);
    if (at < 0) return '';
    const { streamId } = this.events[at];
    for (const e of this.events.slice(at + 1)) {
      if (e.streamId === streamId) await send(e.eventId, e.message);
    }
    return streamId;
  }
}

const sessions = new Map();

async function sessionTransport(req) {
  const id = req.headers['mcp-session-id'];
  if (id && sessions.has(id)) return sessions.get(id);
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    eventStore: mode === 'resumable' ? new EventStore() : undefined,
    onsessioninitialized: (sid) => { sessions.set(sid, transport); },
  });
  transport.onclose = () => { if (transport.sessionId) sessions.delete(transport.sessionId); };
  await mcpServer().connect(transport);
  return transport;
}

async function handle(req, res) {
  if (req.url === '/count') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(counts));
    return;
  }
  if (!req.url.startsWith('/mcp')) {
    res.writeHead(404).end();
    return;
  }
  if (mode === 'stateful' || mode === 'resumable') {
    await (await sessionTransport(req)).handleRequest(req, res);
    return;
  }
  // Stateless: a server and a transport per request.
  const server = mcpServer();
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: mode === 'json',
  });
  res.on('close', () => { transport.close(); server.close(); });
  await server.connect(transport);
  await transport.handleRequest(req, res);
}

if (!['sse', 'json', 'stateful', 'resumable'].includes(mode)) {
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
