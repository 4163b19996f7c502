// The benchmark's round trip in Mastra, in-process: the agent streams until
// its `ask_user` call suspends, then `resumeStream` answers "staging" and
// reads to the end; N times after 3 warm-ups, each checked. Prints one JSON
// line in askloop-bench's shape (`"impl":"mastra"`). The model is the bench's
// fake OpenAI-compatible server at OPENAI_BASE_URL.
//
//   OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 node roundtrip.mjs N [--model NAME]

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_ID, benchMastra } from './mastra.mjs';

const WARM_UPS = 3;
const PROMPT = process.env.ASKLOOP_BENCH_PROMPT || 'Deploy the billing service.';
const QUESTION = 'Which environment should I deploy to?';
const ANSWER = 'staging';
// Mastra's askUserTool hands the model its result as JSON, which the fake model repeats.
const EXPECTED = 'Deploying to {"content":"User answered: staging","isError":false}.';

const n = Number(process.argv[2]);
if (!Number.isInteger(n) || n < 1) {
  console.error('usage: node roundtrip.mjs N [--model NAME] [--instructions TEXT]');
  process.exit(2);
}
const model = option('--model') || 'gpt-4o-mini';
const instructions = option('--instructions') || process.env.ASKLOOP_BENCH_INSTRUCTIONS || 'You help deploy services.';

const dir = mkdtempSync(join(tmpdir(), 'mastra-bench-'));
try {
  const mastra = benchMastra({ instructions, model, db: join(dir, 'runs.db') });
  const agent = mastra.getAgent(AGENT_ID);
  for (let i = 0; i < WARM_UPS; i += 1) await roundTrip(agent);
  const suspends = [];
  const resumes = [];
  const cpuBefore = process.cpuUsage();
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i += 1) {
    const [suspend, resume] = await roundTrip(agent);
    suspends.push(suspend);
    resumes.push(resume);
  }
  const totalS = Number(process.hrtime.bigint() - started) / 1e9;
  const cpu = process.cpuUsage(cpuBefore);
  console.log(JSON.stringify({
    impl: 'mastra',
    mode: 'roundtrip',
    n,
    total_s: round3(totalS),
    roundtrips_per_s: round3(n / totalS),
    p50_suspend_ms: percentile(suspends, 50),
    p99_suspend_ms: percentile(suspends, 99),
    p50_resume_ms: percentile(resumes, 50),
    p99_resume_ms: percentile(resumes, 99),
    cpu_ms_per_roundtrip: round3((cpu.user + cpu.system) / 1000 / n),
    peak_rss_mb: round3((process.resourceUsage().maxRSS * 1024) / 1e6),
  }));
} finally {
  rmSync(dir, { recursive: true, force: true });
}

/** One checked round trip: [suspend ms, resume ms]. */
async function roundTrip(agent) {
  let t = performance.now();
  const stream = await agent.stream(PROMPT);
  let suspended = null;
  for await (const chunk of stream.fullStream) {
    if (chunk.type === 'tool-call-suspended') suspended = chunk.payload;
  }
  const suspend = performance.now() - t;
  if (suspended?.suspendPayload?.question !== QUESTION) {
    throw new Error(`the stream should have suspended on ${JSON.stringify(QUESTION)}; it showed ${JSON.stringify(suspended)}`);
  }
  t = performance.now();
  const resumed = await agent.resumeStream(ANSWER, { runId: stream.runId, toolCallId: suspended.toolCallId });
  let text = '';
  for await (const chunk of resumed.fullStream) {
    if (chunk.type === 'text-delta') text += chunk.payload.text;
  }
  const resume = performance.now() - t;
  if (text !== EXPECTED) throw new Error(`the resumed stream should have said ${JSON.stringify(EXPECTED)}; it said ${JSON.stringify(text)}`);
  return [suspend, resume];
}

function option(name) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : undefined;
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return round3(sorted[index]);
}

function round3(x) {
  return Math.round(x * 1000) / 1000;
}
