// askloop serve driven by the published @mastra/client-js (1.47.0, the
// version Mastra's recorded traffic in crates/askloop-testkit/fixtures/
// mastra-server/ was made with), used exactly as Mastra's users use it.
//
// The server comes from the environment:
//   ASKLOOP_URL        e.g. http://127.0.0.1:4111 (without /api)
//   ASKLOOP_WRITE_DIR  the folder the `writer` agent's write_file writes in
//   ASKLOOP_API_TOKEN  the server's token, if it has one
// and must serve two scripted agents (see crates/askloop-cli/tests/interop.rs):
//   assistant  ask_user: "Which environment should I deploy to?" (staging,
//              production), then "Deploying to <answer>."
//   writer     write_file notes/deploy.txt (needs approval), then "Done: <result>"
//
// Run: ASKLOOP_URL=... ASKLOOP_WRITE_DIR=... node --test client.test.mjs

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { MastraClient, MastraClientError } from '@mastra/client-js';

const baseUrl = process.env.ASKLOOP_URL;
const writeDir = process.env.ASKLOOP_WRITE_DIR;
if (!baseUrl || !writeDir) {
  throw new Error('set ASKLOOP_URL (e.g. http://127.0.0.1:4111) and ASKLOOP_WRITE_DIR');
}

// With ASKLOOP_API_TOKEN, the server wants it as a bearer token, which the
// client sends as one of its headers. No retries: a failed request is a
// failed test, not a second request.
const token = process.env.ASKLOOP_API_TOKEN;
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const client = new MastraClient({ baseUrl, retries: 0, headers });

/** Every chunk of a streaming response, through the client's own parser. */
async function chunksOf(response) {
  const chunks = [];
  await response.processDataStream({ onChunk: async (chunk) => { chunks.push(chunk); } });
  return chunks;
}

/** The chunks' types, in order. */
const types = (chunks) => chunks.map((c) => c.type);

/** The streamed text of the chunks. */
const textOf = (chunks) => chunks.filter((c) => c.type === 'text-delta').map((c) => c.payload.text).join('');

/** Every chunk is Mastra's envelope for this run. */
function assertEnvelopes(chunks, runId) {
  assert.ok(chunks.length > 0, 'the stream has chunks');
  for (const chunk of chunks) {
    assert.equal(chunk.runId, runId, `${chunk.type} belongs to run ${runId}`);
    assert.equal(chunk.from, 'AGENT', `${chunk.type} comes from the agent`);
    assert.equal(typeof chunk.payload, 'object', `${chunk.type} has a payload`);
  }
}

/** Starts a run of the `assistant` agent and reads it to its question. */
async function askedRun(options = {}) {
  const agent = client.getAgent('assistant');
  const response = await agent.stream('Deploy the app. Ask me which environment first.', options);
  const chunks = await chunksOf(response);
  const suspended = chunks.at(-1);
  assert.equal(suspended.type, 'tool-call-suspended', `the stream ends at the question: ${types(chunks)}`);
  return { agent, chunks, suspended, runId: suspended.runId };
}

test('without the token the client gets a 401 in the error shape', { skip: !token && 'ASKLOOP_API_TOKEN is not set' }, async () => {
  const stranger = new MastraClient({ baseUrl, retries: 0 });
  await assert.rejects(stranger.listAgents(), (err) => {
    assert.ok(err instanceof MastraClientError, `a MastraClientError: ${err}`);
    assert.equal(err.status, 401);
    assert.equal(typeof err.body.error.message, 'string');
    return true;
  });
});

test('listAgents and details describe the configured agents and their tools', async () => {
  const agents = await client.listAgents();
  assert.deepEqual(Object.keys(agents).sort(), ['assistant', 'writer']);
  const writer = await client.getAgent('writer').details();
  assert.equal(writer.name, 'Writer');
  assert.equal(writer.tools.write_file.requireApproval, true);
  assert.equal(agents.assistant.tools.ask_user.id, 'ask_user');
});

test('stream stops at tool-call-suspended with the question, and resumeStream finishes with the answer', async () => {
  const { agent, chunks, suspended, runId } = await askedRun();
  assertEnvelopes(chunks, runId);
  assert.equal(chunks[0].type, 'start');
  const call = chunks.find((c) => c.type === 'tool-call');
  assert.equal(call.payload.toolName, 'ask_user');
  assert.equal(call.payload.args.question, 'Which environment should I deploy to?');
  assert.ok(types(chunks).includes('tool-call-delta'), 'the arguments stream');
  assert.ok(!types(chunks).includes('finish'), 'a suspended stream has no finish');

  const { toolCallId, toolName, suspendPayload, resumeSchema } = suspended.payload;
  assert.equal(toolCallId, call.payload.toolCallId);
  assert.equal(toolName, 'ask_user');
  assert.equal(suspendPayload.question, 'Which environment should I deploy to?');
  assert.deepEqual(suspendPayload.options.map((o) => o.label), ['staging', 'production']);
  assert.equal(typeof resumeSchema, 'string', 'resumeSchema is a JSON Schema in a string, as Mastra sends it');
  JSON.parse(resumeSchema);

  const resumed = await agent.resumeStream('staging', { runId, toolCallId });
  assert.equal(resumed.status, 200);
  const rest = await chunksOf(resumed);
  assertEnvelopes(rest, runId);
  const result = rest.find((c) => c.type === 'tool-result');
  assert.equal(result.payload.toolCallId, toolCallId);
  assert.equal(result.payload.toolName, 'ask_user');
  assert.match(JSON.stringify(result.payload.result), /staging/);
  assert.equal(rest.at(-1).type, 'finish', `the resumed stream finishes: ${types(rest)}`);
  assert.match(textOf(rest), /^Deploying to .*staging.*\.$/);
  // What a UI saves: the finish chunk's messages and output, as Mastra sends them.
  const finish = rest.at(-1).payload;
  assert.equal(finish.stepResult.reason, 'stop');
  assert.equal(finish.output.text, textOf(rest));
  assert.deepEqual(finish.messages.all.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant']);
  assert.ok(Array.isArray(finish.messages.nonUser) && Array.isArray(finish.messages.user));

  const listed = await agent.listSuspendedRuns();
  assert.ok(!listed.runs.some((r) => r.runId === runId), 'an answered run is no longer suspended');
});

test('listSuspendedRuns lists a suspended run with its pending question', async () => {
  const { agent, suspended, runId } = await askedRun();
  const listed = await agent.listSuspendedRuns();
  assert.equal(typeof listed.total, 'number');
  const run = listed.runs.find((r) => r.runId === runId);
  assert.ok(run, `run ${runId} is listed`);
  assert.equal(run.status, 'suspended');
  assert.ok(!Number.isNaN(Date.parse(run.suspendedAt)), 'suspendedAt is a date');
  assert.equal(run.toolCalls.length, 1);
  const [call] = run.toolCalls;
  assert.equal(call.toolCallId, suspended.payload.toolCallId);
  assert.equal(call.toolName, 'ask_user');
  assert.equal(call.suspendPayload.question, 'Which environment should I deploy to?');
});

test('an answer outside the options is refused with 422 and the question stays open', async () => {
  const { agent, suspended, runId } = await askedRun();
  const { toolCallId } = suspended.payload;
  await assert.rejects(
    agent.resumeStream('qa', { runId, toolCallId }),
    (err) => {
      assert.ok(err instanceof MastraClientError, `a MastraClientError: ${err}`);
      assert.equal(err.status, 422);
      assert.match(err.body.error.message, /staging/, 'the message lists what is accepted');
      return true;
    },
  );
  const listed = await agent.listSuspendedRuns();
  assert.ok(listed.runs.some((r) => r.runId === runId), 'the run is still suspended');

  const answered = await chunksOf(await agent.resumeStream('production', { runId, toolCallId }));
  assert.match(textOf(answered), /production/);
});

test('a run started with its own runId streams under that id and resumes by it', async () => {
  const ownId = randomUUID();
  const { agent, chunks, suspended, runId } = await askedRun({ runId: ownId });
  assert.equal(runId, ownId);
  assertEnvelopes(chunks, ownId);
  const rest = await chunksOf(await agent.resumeStream('staging', { runId: ownId, toolCallId: suspended.payload.toolCallId }));
  assertEnvelopes(rest, ownId);
  assert.equal(rest.at(-1).type, 'finish');
});

test('generate answers a suspended run with finishReason suspended and its pending call', async () => {
  const agent = client.getAgent('assistant');
  const out = await agent.generate('Deploy the app.');
  assert.equal(out.finishReason, 'suspended');
  assert.equal(out.suspendPayload.question, 'Which environment should I deploy to?');
  const [pending] = out.pendingToolCalls;
  assert.equal(pending.toolName, 'ask_user');
  const rest = await chunksOf(await agent.resumeStream('staging', { runId: out.runId, toolCallId: pending.toolCallId }));
  assert.equal(rest.at(-1).type, 'finish');
});

/** Starts a run of the `writer` agent and reads it to its approval request. */
async function approvalRun() {
  const agent = client.getAgent('writer');
  const chunks = await chunksOf(await agent.stream('Write the deploy notes.'));
  const approval = chunks.at(-1);
  assert.equal(approval.type, 'tool-call-approval', `the stream ends at the approval: ${types(chunks)}`);
  assertEnvelopes(chunks, approval.runId);
  assert.equal(approval.payload.toolName, 'write_file');
  assert.equal(approval.payload.args.path, 'notes/deploy.txt');
  assert.ok(!existsSync(join(writeDir, 'notes/deploy.txt')), 'nothing is written before approval');
  const listed = await agent.listSuspendedRuns();
  const run = listed.runs.find((r) => r.runId === approval.runId);
  assert.equal(run.toolCalls[0].requiresApproval, true);
  return { agent, runId: approval.runId, toolCallId: approval.payload.toolCallId };
}

// One after the other: both would write the same file.
test('approveToolCall runs the tool and declineToolCall does not', async (t) => {
  await t.test('approve', async () => {
    const { agent, runId, toolCallId } = await approvalRun();
    const rest = await chunksOf(await agent.approveToolCall({ runId, toolCallId }));
    assertEnvelopes(rest, runId);
    const result = rest.find((c) => c.type === 'tool-result');
    assert.equal(result.payload.toolCallId, toolCallId);
    assert.equal(result.payload.toolName, 'write_file');
    assert.equal(rest.at(-1).type, 'finish', `${types(rest)}`);
    assert.match(textOf(rest), /^Done: /);
    assert.equal(readFileSync(join(writeDir, 'notes/deploy.txt'), 'utf8'), 'deploy to staging');
  });

  await t.test('decline', async () => {
    const { rmSync } = await import('node:fs');
    rmSync(join(writeDir, 'notes/deploy.txt'));
    const { agent, runId, toolCallId } = await approvalRun();
    const rest = await chunksOf(await agent.declineToolCall({ runId, toolCallId, reason: 'not today' }));
    assertEnvelopes(rest, runId);
    const denied = rest.find((c) => c.type === 'tool-output-denied');
    assert.ok(denied, `a tool-output-denied chunk: ${types(rest)}`);
    assert.equal(denied.payload.toolCallId, toolCallId);
    assert.equal(rest.at(-1).type, 'finish');
    assert.ok(!existsSync(join(writeDir, 'notes/deploy.txt')), 'a declined call writes nothing');
    const listed = await agent.listSuspendedRuns();
    assert.ok(!listed.runs.some((r) => r.runId === runId));
  });

  await t.test('approveToolCallGenerate and declineToolCallGenerate answer with the outcome', async () => {
    const { rmSync } = await import('node:fs');
    let { agent, runId, toolCallId } = await approvalRun();
    const approved = await agent.approveToolCallGenerate({ runId, toolCallId });
    assert.equal(approved.runId, runId);
    assert.equal(approved.finishReason, 'stop');
    assert.match(approved.text, /^Done: /);
    assert.equal(readFileSync(join(writeDir, 'notes/deploy.txt'), 'utf8'), 'deploy to staging');
    rmSync(join(writeDir, 'notes/deploy.txt'));

    ({ agent, runId, toolCallId } = await approvalRun());
    const declined = await agent.declineToolCallGenerate({ runId, toolCallId });
    assert.equal(declined.runId, runId);
    assert.equal(declined.status, 'completed');
    assert.ok(!existsSync(join(writeDir, 'notes/deploy.txt')), 'a declined call writes nothing');
  });
});

test('memory: a second stream sent only its new message continues the thread, and the thread routes list, show, rename and delete it', async () => {
  const agent = client.getAgent('assistant');
  const thread = `interop-thread-${randomUUID()}`;
  const resource = `interop-user-${randomUUID()}`;
  const memory = { thread, resource };

  const first = await chunksOf(await agent.stream('Deploy the app. Ask me which environment first.', { memory }));
  const asked = first.at(-1);
  assert.equal(asked.type, 'tool-call-suspended', types(first));
  const done = await chunksOf(await agent.resumeStream('staging', { runId: asked.runId, toolCallId: asked.payload.toolCallId }));
  assert.match(textOf(done), /^Deploying to .*staging.*\.$/);

  // Only the new message: the agent's next question comes from the thread's
  // context (its script picks the turn by the assistant messages it is given).
  const second = await chunksOf(await agent.stream('Now deploy it again, ask me again.', { memory }));
  const again = second.at(-1);
  assert.equal(again.type, 'tool-call-suspended', types(second));
  assert.equal(again.payload.suspendPayload.question, 'Again: which environment?');

  const byThread = await agent.listSuspendedRuns({ threadId: thread });
  assert.deepEqual(byThread.runs.map((r) => r.runId), [again.runId]);
  assert.equal(byThread.runs[0].threadId, thread);
  assert.equal(byThread.runs[0].resourceId, resource);
  const byResource = await agent.listSuspendedRuns({ resourceId: resource });
  assert.deepEqual(byResource.runs.map((r) => r.runId), [again.runId]);

  const listed = await client.listMemoryThreads({ resourceId: resource, agentId: 'assistant' });
  assert.deepEqual(listed.threads.map((t) => t.id), [thread]);
  assert.equal(listed.total, 1);

  const handle = client.getMemoryThread({ threadId: thread, agentId: 'assistant' });
  const shown = await handle.get();
  assert.equal(shown.resourceId, resource);
  const { messages } = await handle.listMessages();
  assert.deepEqual(messages.map((m) => m.role), ['user', 'assistant', 'assistant', 'user', 'assistant']);
  const waiting = messages.at(-1);
  const part = waiting.content.parts.find((p) => p.type === 'tool-invocation');
  assert.equal(part.toolInvocation.state, 'call');
  const suspendedTool = waiting.content.metadata.suspendedTools[part.toolInvocation.toolCallId];
  assert.equal(suspendedTool.runId, again.runId);

  const finished = await chunksOf(await agent.resumeStream('production', { runId: again.runId, toolCallId: again.payload.toolCallId }));
  assert.match(textOf(finished), /production.*you first asked: Deploy the app\. Ask me which environment first\./);

  const renamed = await handle.update({ title: 'deploys', metadata: { step: 2 }, resourceId: resource });
  assert.equal(renamed.title, 'deploys');
  assert.deepEqual(renamed.metadata, { step: 2 });
  const created = await client.createMemoryThread({ threadId: `${thread}-b`, resourceId: resource, title: 'second', agentId: 'assistant' });
  assert.equal(created.title, 'second');
  assert.equal((await client.listMemoryThreads({ resourceId: resource, agentId: 'assistant' })).total, 2);

  await handle.delete();
  await assert.rejects(handle.get(), (err) => {
    assert.ok(err instanceof MastraClientError, `a MastraClientError: ${err}`);
    assert.equal(err.status, 404);
    return true;
  });
  const left = await client.listMemoryThreads({ resourceId: resource, agentId: 'assistant' });
  assert.deepEqual(left.threads.map((t) => t.id), [`${thread}-b`]);
});
