// The benchmark's agent in Mastra: the same instructions, Mastra's own
// `askUserTool` under the name the model calls (`ask_user`), an OpenAI
// model at OPENAI_BASE_URL (the bench's fake model server), and a LibSQL
// store in a file, as a Mastra user would set it up.

import { createOpenAI } from '@ai-sdk/openai';
import { Agent } from '@mastra/core/agent';
import { Mastra } from '@mastra/core/mastra';
import { askUserTool } from '@mastra/core/tools';
import { LibSQLStore } from '@mastra/libsql';

export const AGENT_ID = 'deployment-assistant';

/** A Mastra instance with the bench's agent; `db` is a file path for LibSQL. */
export function benchMastra({ instructions, model, db }) {
  const openai = createOpenAI({
    baseURL: required('OPENAI_BASE_URL'),
    apiKey: process.env.OPENAI_API_KEY || 'bench',
  });
  const agent = new Agent({
    id: AGENT_ID,
    name: AGENT_ID,
    instructions,
    model: openai.chat(model),
    tools: { ask_user: askUserTool },
  });
  return new Mastra({
    agents: { [AGENT_ID]: agent },
    storage: new LibSQLStore({ id: 'bench', url: `file:${db}` }),
    logger: false,
  });
}

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`mastra bench: ${name} is not set (the OpenAI-compatible base URL, up to /v1)`);
    process.exit(2);
  }
  return value;
}
