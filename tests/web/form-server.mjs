// A small MCP server on stdio (the official TypeScript SDK, installed in
// tests/mcp) whose one tool, `register`, asks the person for a form whose
// fields are named `__proto__`, `constructor` and `name`: names a page
// must keep apart from the properties every JavaScript object has. The
// tool answers with the content it was sent, as JSON: as it came over the
// wire, since the SDK's own parsing of an answer drops a `__proto__` key.
//
// Started by the askloop agent of crates/askloop-cli/tests/web_visible.rs.

import { McpServer } from '../mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/server/mcp.js';
import { StdioServerTransport } from '../mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/server/stdio.js';

// Parsed, not written as a literal: in a literal, `__proto__:` would set
// the object's prototype instead of naming a field.
const requestedSchema = JSON.parse(`{
  "type": "object",
  "properties": {
    "__proto__": {"type": "string", "title": "Prototype name"},
    "constructor": {"type": "string", "title": "Constructor"},
    "name": {"type": "string", "title": "Name"}
  },
  "required": ["__proto__", "constructor", "name"]
}`);

const server = new McpServer({ name: 'forms', version: '1.0.0' });
/** The last answer to a form, as the client sent it. */
let received = null;
server.registerTool('register', { description: 'Registers the person; asks for their details.' }, async () => {
  const answer = await server.server.elicitInput({ message: 'Your details, please.', requestedSchema });
  return { content: [{ type: 'text', text: JSON.stringify(received?.content ?? { action: answer.action }) }] };
});
const transport = new StdioServerTransport();
await server.connect(transport);
const deliver = transport.onmessage;
transport.onmessage = (message, extra) => {
  if (message?.result && typeof message.result.action === 'string') received = message.result;
  deliver?.(message, extra);
};
