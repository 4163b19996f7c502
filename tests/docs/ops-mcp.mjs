// A small MCP server on stdio with the tools docs/server.md's examples
// call, `deploy` and `send_mail`; each answers with what it was asked to
// do. The docs' test (crates/askloop-cli/tests/docs_blocks.rs) gives it to
// the `deployer`, `releaser` and `mailer` agents of that page, with
// tests/mcp's pinned MCP SDK.
import { createRequire } from 'node:module';

const require = createRequire(new URL('../mcp/package.json', import.meta.url));
const { Server } = require('@modelcontextprotocol/sdk/server/index.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');
const { CallToolRequestSchema, ListToolsRequestSchema } = require('@modelcontextprotocol/sdk/types.js');

const tools = [
  {
    name: 'deploy',
    description: 'Deploys the app to an environment.',
    inputSchema: {
      type: 'object',
      properties: { env: { type: 'string', enum: ['staging', 'canary', 'production'] } },
      required: ['env'],
      additionalProperties: false,
    },
  },
  {
    name: 'send_mail',
    description: 'Sends a mail.',
    inputSchema: {
      type: 'object',
      properties: { to: { type: 'string' }, subject: { type: 'string' } },
      required: ['to', 'subject'],
      additionalProperties: false,
    },
  },
];

const server = new Server({ name: 'ops', version: '1.0.0' }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async ({ params }) => ({
  content: [{ type: 'text', text: `${params.name} ${JSON.stringify(params.arguments)}: done` }],
}));
await server.connect(new StdioServerTransport());
