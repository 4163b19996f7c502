// Uses README.md's useChat component as a person would, against askloop
// serve's offline demo agent (crates/askloop-cli/src/demo.rs): a message,
// then its free-text question and its choice questions answered in the
// page, on a thread of the user's (the component sends `memory`).
import assert from 'node:assert/strict';

export default async function drive({ page, server, props }) {
  const message = page.getByLabel('Message');
  await message.fill('Plan my project');
  await message.press('Enter');

  const named = page.getByRole('group', { name: 'What should the project be called?' });
  await named.waitFor();
  await named.getByLabel('Answer').fill('Zed');
  const sent = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/chat/assistant'));
  await named.getByLabel('Answer').press('Enter');
  const answered = await sent;
  // The body the transport made keeps the answer and the chat, with memory.
  const body = answered.request().postDataJSON();
  const refused = answered.status() === 200 ? '' : ` (answered ${answered.status()}: ${await answered.text()})`;
  assert.equal(body.resumeData, 'Zed', `the answer's request lost it${refused}: ${JSON.stringify(body)}`);
  assert.ok(body.runId && body.toolCallId, `the answer's request lost its run${refused}: ${JSON.stringify(body)}`);
  assert.deepEqual(body.memory, { thread: body.id, resource: props.userId }, JSON.stringify(body));
  assert.equal(refused, '', 'the answer was refused');

  await page.getByRole('group', { name: 'Which language should it use?' }).getByRole('button', { name: 'Rust' }).click();
  await page.getByRole('group', { name: 'Which extras do you want?' }).getByRole('button', { name: 'CI' }).click();
  await page.getByText(/The plan is ready/).waitFor();

  // The conversation is the thread the component named, of the user's resource.
  const listed = await (await fetch(`${server}/api/memory/threads?resourceId=${props.userId}`)).json();
  assert.deepEqual(listed.threads.map((t) => t.id), [body.id]);
}
