// askloop serve's POST /chat/{agentId} driven by the published Vercel AI SDK
// (`ai` 7.0.173): AbstractChat with DefaultChatTransport is the engine that
// React's useChat runs, so what passes here is what a useChat front end
// sees. Run by crates/askloop-cli/tests/aisdk.rs against a real server with
// ASKLOOP_URL, ASKLOOP_API_TOKEN and ASKLOOP_WRITE_DIR set, the tokens of
// alice and bob (each walled to one resource's threads, team-a and team-b)
// in ASKLOOP_ALICE_TOKEN and ASKLOOP_BOB_TOKEN, and the story the slow
// `narrator` agent tells in ASKLOOP_STORY.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from 'ai';

const base = process.env.ASKLOOP_URL;
const token = process.env.ASKLOOP_API_TOKEN;
const writeDir = process.env.ASKLOOP_WRITE_DIR;
const aliceToken = process.env.ASKLOOP_ALICE_TOKEN;
const bobToken = process.env.ASKLOOP_BOB_TOKEN;
const story = process.env.ASKLOOP_STORY;
assert.ok(
  base && token && writeDir && aliceToken && bobToken && story,
  'ASKLOOP_URL, ASKLOOP_API_TOKEN, ASKLOOP_WRITE_DIR, ASKLOOP_ALICE_TOKEN, ASKLOOP_BOB_TOKEN and ASKLOOP_STORY must be set',
);

// The state a framework binding (React's useChat) keeps; here plain arrays.
class PlainState {
  status = 'ready';
  error = undefined;
  constructor(messages = []) {
    this.messages = messages;
  }
  pushMessage = (message) => { this.messages = [...this.messages, message]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new PlainState(messages) });
  }
}

function transportFor(agent, options = {}) {
  return new DefaultChatTransport({
    api: `${base}/chat/${agent}`,
    headers: { Authorization: `Bearer ${options.token ?? token}` },
    ...options.transport,
  });
}

// A chat with `agent`, as the server's token unless `token` says whose;
// `id` and `messages` open one a client already has.
function chatWith(agent, options = {}) {
  return new Chat({
    id: options.id,
    messages: options.messages,
    transport: transportFor(agent, options),
    sendAutomaticallyWhen: options.sendAutomaticallyWhen,
  });
}

// Waits until the chat has no request in flight (an automatic send after an
// approval starts one by itself).
async function settled(chat) {
  for (let i = 0; i < 500; i++) {
    if (chat.status === 'ready' || chat.status === 'error') {
      await new Promise((resolve) => setTimeout(resolve, 10));
      if (chat.status === 'ready' || chat.status === 'error') return;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`the chat did not settle: ${chat.status}`);
}

// Waits, at most ten seconds, until `condition()` holds.
async function until(condition, what) {
  for (let i = 0; i < 500; i++) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`timed out waiting for ${what}`);
}

const last = (chat) => chat.messages.at(-1);
const toolParts = (message) => message.parts.filter((p) => p.type.startsWith('tool-'));
const toolPart = (message) => toolParts(message)[0];
const text = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

test('a question arrives as a data part and is answered with runId and resumeData in the body', async () => {
  const chat = chatWith('assistant');
  await chat.sendMessage({ text: 'Deploy the app.' });
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  const asked = last(chat);
  assert.equal(asked.role, 'assistant');
  assert.equal(toolPart(asked).type, 'tool-ask_user');
  assert.equal(toolPart(asked).state, 'input-available');
  const question = asked.parts.find((p) => p.type === 'data-tool-call-suspended');
  assert.ok(question, JSON.stringify(asked.parts));
  const { runId, toolCallId, suspendPayload } = question.data;
  assert.equal(suspendPayload.question, 'Which environment should I deploy to?');
  assert.equal(question.id, toolCallId);

  // An answer the question does not take: the chat shows the 422's body,
  // and the question stays open.
  await chat.sendMessage(undefined, { body: { runId, resumeData: 'qa' } });
  await settled(chat);
  assert.equal(chat.status, 'error');
  assert.match(chat.error.message, /invalid_answer/);
  assert.match(chat.error.message, /staging/);
  chat.clearError();

  await chat.sendMessage(undefined, { body: { runId, resumeData: 'staging' } });
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(chat.messages.length, 2, 'the answer continues the same assistant message');
  const answered = last(chat);
  assert.equal(answered.id, asked.id);
  assert.equal(toolPart(answered).state, 'output-available');
  assert.match(text(answered), /^Deploying to .*staging/);
});

test('two open questions are answered each by its toolCallId, the second first: the run waits for the other, then replies with both in call order', async () => {
  const chat = chatWith('surveyor');
  await chat.sendMessage({ text: 'Deploy the app.' });
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  const questions = last(chat).parts.filter((p) => p.type === 'data-tool-call-suspended');
  assert.deepEqual(
    questions.map((q) => q.data.suspendPayload.question),
    ['Which environment?', 'Which version?'],
  );
  const [environment, version] = questions.map((q) => q.data.toolCallId);
  const { runId } = questions[0].data;
  const answer = (resumeData, toolCallId) => chat.sendMessage(undefined, { body: { runId, resumeData, toolCallId } });
  const states = () => Object.fromEntries(toolParts(last(chat)).map((p) => [p.toolCallId, p.state]));

  // Without toolCallId the server cannot tell which question is answered.
  await answer('staging');
  await settled(chat);
  assert.equal(chat.status, 'error');
  assert.equal(chat.error.statusCode, 400);
  assert.match(chat.error.message, /ambiguous_resume/);
  chat.clearError();
  assert.deepEqual(states(), { [environment]: 'input-available', [version]: 'input-available' });

  await answer('v2.4', version);
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.deepEqual(states(), { [environment]: 'input-available', [version]: 'output-available' });
  assert.equal(
    last(chat).parts.filter((p) => p.type === 'data-tool-call-suspended' && p.id === environment).length,
    1,
    'the open question is still shown, once',
  );
  assert.equal(text(last(chat)), '', 'no reply while a question is open');
  const waiting = await runOf(runId);
  assert.equal(waiting.status, 'suspended');
  assert.deepEqual(waiting.pendingToolCalls.map((p) => p.toolCallId), [environment]);

  await answer('staging', environment);
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(chat.messages.length, 2, 'both answers continue the assistant message that asked');
  assert.deepEqual(states(), { [environment]: 'output-available', [version]: 'output-available' });
  assert.equal(text(last(chat)), 'Told: User answered: staging; User answered: v2.4');
  assert.equal((await runOf(runId)).status, 'completed');
});

test('addToolApprovalResponse approves a call; the tool runs once and the chat goes on', async () => {
  const chat = chatWith('writer', { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  await chat.sendMessage({ text: 'Write the deploy notes.' });
  await settled(chat);
  const requested = toolPart(last(chat));
  assert.equal(requested.state, 'approval-requested', JSON.stringify(last(chat).parts));
  const data = last(chat).parts.find((p) => p.type === 'data-tool-call-approval').data;
  assert.equal(requested.approval.id, `${data.runId}::${requested.toolCallId}`);

  await chat.addToolApprovalResponse({ id: requested.approval.id, approved: true });
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(chat.messages.length, 2);
  const done = toolPart(last(chat));
  assert.equal(done.state, 'output-available');
  assert.match(text(last(chat)), /^Done: /);
  assert.equal(readFileSync(join(writeDir, 'notes/deploy.txt'), 'utf8'), 'deploy to staging');
});

test('addToolApprovalResponse with approved false declines: the tool never runs, the model hears why', async () => {
  const chat = chatWith('writer', { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  await chat.sendMessage({ text: 'Write the deploy notes elsewhere.' });
  await settled(chat);
  const requested = toolPart(last(chat));
  assert.equal(requested.state, 'approval-requested');
  await chat.addToolApprovalResponse({ id: requested.approval.id, approved: false, reason: 'not on a Friday' });
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(toolPart(last(chat)).state, 'output-denied');
  assert.match(text(last(chat)), /not on a Friday/);
});

// The request a useChat app sends after addToolApprovalResponse, built by
// hand from the messages as they stood when the approval was asked, so its
// approval can be forged or sent twice.
function approvalRequest(chatId, asked, toolCallId, approval) {
  const assistant = asked.at(-1);
  const parts = assistant.parts.map((p) =>
    p.toolCallId === toolCallId && p.type.startsWith('tool-') ? { ...p, state: 'approval-responded', approval } : p,
  );
  return fetch(`${base}/chat/writer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({
      id: chatId,
      messages: [...asked.slice(0, -1), { ...assistant, parts }],
      trigger: 'submit-message',
      messageId: assistant.id,
    }),
  });
}

async function runOf(runId) {
  const response = await fetch(`${base}/api/runs/${runId}`, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(response.status, 200);
  return response.json();
}

test('a forged approval id is refused and nothing runs; the same decision sent again runs nothing; a contrary one is refused', async () => {
  const chat = chatWith('writer', { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  await chat.sendMessage({ text: 'Write the release notes.' });
  await settled(chat);
  const requested = toolPart(last(chat));
  assert.equal(requested.state, 'approval-requested');
  const [runId] = requested.approval.id.split('::');
  const asked = structuredClone(chat.messages);
  const send = (approval) => approvalRequest(chat.id, asked, requested.toolCallId, approval);

  // Another run's id in Mastra's form: the run does not exist, nothing runs.
  const forged = await send({
    id: `01900000-0000-7000-8000-000000000000::${requested.toolCallId}`,
    approved: true,
  });
  assert.equal(forged.status, 404, await forged.text());
  assert.equal((await runOf(runId)).status, 'suspended', 'the real run still waits');

  await chat.addToolApprovalResponse({ id: requested.approval.id, approved: true });
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  const done = await runOf(runId);
  assert.equal(done.status, 'completed');

  // A client retrying after a dropped response: answered as applied, with
  // the stored output, and nothing written.
  const again = await send({ id: requested.approval.id, approved: true });
  assert.equal(again.status, 200);
  const body = await again.text();
  assert.match(body, /"type":"tool-output-available"/);
  assert.equal((await runOf(runId)).version, done.version, 'the repeat wrote nothing');

  const contrary = await send({ id: requested.approval.id, approved: false });
  assert.equal(contrary.status, 409);
  assert.match(await contrary.text(), /already_decided/);
  assert.equal((await runOf(runId)).version, done.version, 'the contrary decision wrote nothing');
});

test('with memory only the newest message is sent and the thread supplies the rest', async () => {
  const memory = { thread: `aisdk-${Date.now()}`, resource: 'aisdk-user' };
  const chat = chatWith('assistant', {
    transport: {
      prepareSendMessagesRequest: ({ messages, body }) => ({
        body: { ...body, messages: [messages.at(-1)], memory },
      }),
    },
  });
  await chat.sendMessage({ text: 'Deploy the app.' });
  await settled(chat);
  const { runId } = last(chat).parts.find((p) => p.type === 'data-tool-call-suspended').data;
  await chat.sendMessage(undefined, { body: { runId, resumeData: 'production' } });
  await settled(chat);
  assert.match(text(last(chat)), /production/);

  await chat.sendMessage({ text: 'Now deploy it again.' });
  await settled(chat);
  const again = last(chat).parts.find((p) => p.type === 'data-tool-call-suspended');
  assert.equal(again.data.suspendPayload.question, 'Again: which environment?', 'the model saw the first exchange');
  await chat.sendMessage(undefined, { body: { runId: again.data.runId, resumeData: 'staging' } });
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.match(text(last(chat)), /you first asked: Deploy the app\./);
});

test('resumeStream asks GET /chat/{agentId}/{chatId}/stream; with no stream running it is a 204 and the chat stays as it is', async () => {
  const asked = [];
  const chat = chatWith('assistant', {
    transport: {
      fetch: async (url, init) => {
        const response = await fetch(url, init);
        asked.push([init?.method ?? 'GET', String(url), response.status]);
        return response;
      },
    },
  });
  await chat.sendMessage({ text: 'Deploy the app.' });
  await settled(chat);
  const before = structuredClone(chat.messages);
  await chat.resumeStream();
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.deepEqual(chat.messages, before, 'nothing was added or reset');
  assert.deepEqual(asked.at(-1), ['GET', `${base}/chat/assistant/${encodeURIComponent(chat.id)}/stream`, 204]);
});

// A fetch whose connections a test can drop mid-stream, as a network does:
// reading the body then fails with the TypeError browsers give.
function droppableFetch() {
  const open = [];
  return {
    fetch: (url, init = {}) => {
      const drop = new AbortController();
      open.push(drop);
      const signal = init.signal ? AbortSignal.any([init.signal, drop.signal]) : drop.signal;
      return fetch(url, { ...init, signal });
    },
    dropAll: () => {
      for (const connection of open.splice(0)) connection.abort(new TypeError('network error'));
    },
  };
}

async function chunksOf(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

// The text of the assistant message `chat` is receiving now ('' when none).
const streamingText = (chat) => (chat.status === 'streaming' && last(chat).role === 'assistant' ? text(last(chat)) : '');
const textOf = (chunks) => chunks.filter((c) => c.type === 'text-delta').map((c) => c.delta).join('');

async function runningRuns(agent) {
  const response = await fetch(`${base}/api/runs?agentId=${agent}&status=running`, {
    headers: { Authorization: `Bearer ${token}` },
  });
  assert.equal(response.status, 200);
  return (await response.json()).runs;
}

test('a stream dropped mid-way is re-attached while it goes on: from start to finish with the whole text; once the run ended there is none', async () => {
  const network = droppableFetch();
  const transport = transportFor('narrator', { transport: { fetch: network.fetch } });
  const chat = new Chat({ transport });
  const telling = chat.sendMessage({ text: 'Tell me a story.' });
  await until(() => streamingText(chat).length > 0, "the story's first words");
  network.dropAll();
  await telling;
  assert.equal(chat.status, 'error');
  assert.equal(chat.error.message, 'network error');
  const dropped = structuredClone(last(chat));
  assert.ok(story.startsWith(text(dropped)) && text(dropped).length < story.length, text(dropped));

  // The chat comes back as useChat's resume does, and so does a bare
  // reconnect, which shows the chunks themselves.
  const [reattached] = await Promise.all([transport.reconnectToStream({ chatId: chat.id }), chat.resumeStream()]);
  assert.ok(reattached, 'the stream is still going: re-attached, not a 204');
  const replayed = await chunksOf(reattached);
  assert.deepEqual(replayed[0], { type: 'start', messageId: dropped.id }, 'the replay starts at the same start');
  assert.deepEqual(replayed.at(-1), { type: 'finish', finishReason: 'stop' });
  assert.equal(textOf(replayed), story);
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(chat.messages.length, 2);
  assert.equal(last(chat).id, dropped.id);
  assert.equal(text(last(chat)), story, 'the message was rebuilt from the replay, nothing doubled');

  assert.deepEqual(await runningRuns('narrator'), [], 'the run has ended');
  assert.equal(await transport.reconnectToStream({ chatId: chat.id }), null, 'a 204: nothing to re-attach to');
  const shown = structuredClone(chat.messages);
  await chat.resumeStream();
  await settled(chat);
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.deepEqual(chat.messages, shown);
});

test('an unknown agent is a 404 with askloop\'s error body, not a bare 500', async () => {
  const chat = chatWith('no-such-agent');
  await chat.sendMessage({ text: 'Hi' });
  await settled(chat);
  assert.equal(chat.status, 'error');
  assert.match(chat.error.message, /unknown_agent/);
});

// Alice's and Bob's tokens are walled to their own resources' threads;
// the server's token (runOf's) sees every run.
test("another resource's token resuming a run on resource A's thread is a 404 as for an unknown run: its chat shows the error and the run waits as it was", async () => {
  const memory = { thread: `team-a-deploy-${Date.now()}`, resource: 'team-a' };
  const alice = chatWith('assistant', { token: aliceToken });
  await alice.sendMessage({ text: 'Deploy the app.' }, { body: { memory } });
  await settled(alice);
  assert.equal(alice.status, 'ready', alice.error?.message);
  const { runId } = last(alice).parts.find((p) => p.type === 'data-tool-call-suspended').data;
  const before = await runOf(runId);
  assert.equal(before.status, 'suspended');

  // Bob holds Alice's conversation, its run id included (a shared screen,
  // a pasted log), and answers the question with his own token.
  const bob = chatWith('assistant', { token: bobToken, messages: structuredClone(alice.messages) });
  const shown = structuredClone(bob.messages);
  await bob.sendMessage(undefined, { body: { runId, resumeData: 'production' } });
  await settled(bob);
  assert.equal(bob.status, 'error');
  assert.equal(bob.error.statusCode, 404);
  assert.match(bob.error.message, /unknown_run/);
  assert.deepEqual(bob.messages, shown, 'his chat still shows the question, unanswered');
  assert.deepEqual(await runOf(runId), before, 'the run waits as it was');

  await alice.sendMessage(undefined, { body: { runId, resumeData: 'staging' } });
  await settled(alice);
  assert.equal(alice.status, 'ready', alice.error?.message);
  assert.match(text(last(alice)), /^Deploying to .*staging/);
  const done = await runOf(runId);
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.resolutions.map((r) => r.by), ['alice'], 'answered as alice');
});

test("another resource's token re-attaching to a chat streaming on resource A's thread gets no stream; A's token gets all of it", async () => {
  const memory = { thread: `team-a-story-${Date.now()}`, resource: 'team-a' };
  const alice = chatWith('narrator', { token: aliceToken });
  const telling = alice.sendMessage({ text: 'Tell me a story.' }, { body: { memory } });
  await until(() => streamingText(alice).length > 0, "the story's first words");

  const bobs = transportFor('narrator', { token: bobToken });
  assert.equal(await bobs.reconnectToStream({ chatId: alice.id }), null, 'a 204, as for a chat with no stream');
  const bob = chatWith('narrator', { token: bobToken, id: alice.id });
  await bob.resumeStream();
  await settled(bob);
  assert.equal(bob.status, 'ready', bob.error?.message);
  assert.deepEqual(bob.messages, [], 'nothing of the stream is told');

  const alices = await transportFor('narrator', { token: aliceToken }).reconnectToStream({ chatId: alice.id });
  assert.ok(alices, 'the stream was still going when Bob asked');
  const replayed = await chunksOf(alices);
  assert.equal(replayed[0].type, 'start');
  assert.equal(textOf(replayed), story);
  await telling;
  await settled(alice);
  assert.equal(alice.status, 'ready', alice.error?.message);
  assert.equal(text(last(alice)), story);
});
