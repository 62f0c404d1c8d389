// A paid MCP tool on the official MCP SDK (@modelcontextprotocol/sdk, from package.json): the
// reference implementation of Streamable HTTP (stateful: the initialize handshake and
// Mcp-Session-Id), with an x402 paywall written here as the x402 MCP transport says: an unpaid
// call of `get_weather` answers isError: true with the PaymentRequired in structuredContent and
// the same JSON in content[0].text. The tests run it to check our MCP client against the
// reference, not only against the lab's own servers.
//
// Usage: node lab/scripts/mcp-sdk-server.mjs PAYMENT_REQUIRED.json [FACILITATOR_URL OUTPUT.json]
// Listens on 127.0.0.1, a port the kernel chooses, and prints `listening PORT` on stdout.
//
// With a facilitator (the lab's honest one), a call carrying `_meta["x402/payment"]` is paid as
// the transport says: the payment's `accepted` must be one of the quote's entries, the
// facilitator verifies and settles it (`POST /verify`, `/settle` with x402Version,
// paymentPayload, paymentRequirements), and the result is the tool's output (OUTPUT.json) with
// the SettleResponse in `_meta["x402/payment-response"]`; a payment not taken answers isError
// with a fresh PaymentRequired (and the failed SettleResponse in `_meta` when settling failed).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const paymentRequired = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const facilitator = process.argv[3];
const output = process.argv[4] ? JSON.parse(readFileSync(process.argv[4], 'utf8')) : undefined;

/// JSON values equal whatever their keys' order.
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => same(a[k], b[k]));
}

function unpaid(error, settlement) {
  const quote = error ? { ...paymentRequired, error } : paymentRequired;
  const result = {
    isError: true,
    structuredContent: quote,
    content: [{ type: 'text', text: JSON.stringify(quote) }],
  };
  if (settlement) result._meta = { 'x402/payment-response': settlement };
  return result;
}

async function pay(payment) {
  const requirement = paymentRequired.accepts.find((a) => same(a, payment.accepted));
  if (!requirement) return unpaid('No matching payment requirements');
  const call = async (op) => {
    const resp = await fetch(`${facilitator}/${op}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        x402Version: 2,
        paymentPayload: payment,
        paymentRequirements: requirement,
      }),
    });
    return resp.json();
  };
  const verified = await call('verify');
  if (verified.isValid !== true) return unpaid(verified.invalidReason ?? 'invalid_payment');
  const settled = await call('settle');
  if (settled.success !== true) return unpaid('settlement failed', settled);
  return {
    structuredContent: output,
    content: [{ type: 'text', text: JSON.stringify(output) }],
    _meta: { 'x402/payment-response': settled },
  };
}

function newServer() {
  const server = new McpServer({ name: 'x402-lab-sdk', version: '1.0.0' });
  server.registerTool(
    'get_weather',
    {
      description: 'Weather for a city, $0.01 USDC per call (x402)',
      inputSchema: { city: z.string() },
      annotations: { readOnlyHint: true },
    },
    async (_args, extra) => {
      const payment = extra?._meta?.['x402/payment'];
      if (!payment) {
        return unpaid();
      }
      if (!facilitator) {
        return { isError: true, content: [{ type: 'text', text: 'payments are not settled here' }] };
      }
      return pay(payment);
    },
  );
  server.registerTool(
    'delete_records',
    { description: 'Deletes records', annotations: { destructiveHint: true } },
    async () => {
      process.stderr.write('delete_records was called\n');
      return { content: [{ type: 'text', text: 'deleted' }] };
    },
  );
  return server;
}

const transports = new Map();

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

const http = createServer(async (req, res) => {
  try {
    const parsed = req.method === 'POST' ? await body(req) : undefined;
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport && !sessionId && parsed && isInitializeRequest(parsed)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      await newServer().connect(transport);
    }
    if (!transport) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32000, message: 'Bad Request: No valid session ID provided' },
      }));
      return;
    }
    await transport.handleRequest(req, res, parsed);
  } catch (e) {
    if (!res.headersSent) {
      res.writeHead(500);
    }
    res.end(String(e));
  }
});

http.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${http.address().port}\n`);
});
