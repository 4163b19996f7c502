// The official TypeScript SDK as a client of `askloop mcp`: lists the tools,
// calls an agent once as a client that answers elicitations and once as one
// that cannot, and prints what it saw as one JSON object on stdout.
//
// Usage: node client.mjs ASKLOOP_BIN FOLDER   (FOLDER holds askloop.toml)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [bin, folder] = process.argv.slice(2);

async function connect(canBeAsked, asked) {
  const capabilities = canBeAsked ? { elicitation: { form: {} } } : {};
  const client = new Client({ name: "askloop-test", version: "1.0.0" }, { capabilities });
  if (canBeAsked) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.params);
      return { action: "accept", content: { answer: "staging" } };
    });
  }
  const transport = new StdioClientTransport({
    command: bin,
    args: ["mcp", "--page-url", "http://127.0.0.1:4111"],
    cwd: folder,
    env: { ...process.env, ASKLOOP_DB: `${folder}/runs.db` },
    stderr: "inherit",
  });
  await client.connect(transport);
  return client;
}

const asked = [];
const person = await connect(true, asked);
const tools = (await person.listTools()).tools.map((t) => t.name);
const answered = await person.callTool({ name: "ask_deployer", arguments: { message: "Deploy the app" } });
await person.close();

const silent = await connect(false, []);
const waiting = await silent.callTool({ name: "ask_deployer", arguments: { message: "Deploy the app" } });
await silent.close();

console.log(JSON.stringify({ tools, asked, answered, waiting }));
